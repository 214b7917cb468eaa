# SPDX-License-Identifier: MIT
# mk/prove.mk: `make prove`, Frama-C WP on the integer logic of SPEC 2-3 (core/mask.c and
# proof/lemmas_*.c), failing unless every goal is proved; `make prove-wrong` shows that an
# off-by-one predicate fails it. Not part of `make check` (proof/README.md gives the times).
DEPS_PROVE := frama-c-base why3 z3 cvc4

.PHONY: prove prove-wrong deps-prove
deps-prove:
	@mk/deps.sh $(DEPS_PROVE)
prove: deps-prove
	@BUILD=$(BUILD) proof/prove.sh
prove-wrong: deps-prove
	@BUILD=$(BUILD) proof/wrong-predicate.sh
