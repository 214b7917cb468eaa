#!/bin/sh
# SPDX-License-Identifier: MIT
# examples/conform-gate.yml: the workflow parses as YAML, its SMATTN_REF is empty (a
# placeholder the user must fill: a pinned tag that the repository lacks once broke it),
# and its "Install smattn" step, run as written, refuses an empty SMATTN_REF and checks out
# a commit of this repository (not only a branch or tag, as `git clone --branch` did).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
yml=$root/examples/conform-gate.yml
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
/usr/bin/python3 - "$yml" "$t/install.sh" <<'PY'
import sys, yaml
wf = yaml.safe_load(open(sys.argv[1]))
ref = wf["env"]["SMATTN_REF"]
assert ref == "", "SMATTN_REF must stay an empty placeholder, not %r" % ref
steps = [s for s in wf["jobs"]["conform"]["steps"] if s.get("name") == "Install smattn"]
assert len(steps) == 1, "no 'Install smattn' step"
# the clone and checkout lines only: the make install that follows is tested elsewhere
lines = [l for l in steps[0]["run"].splitlines() if "make " not in l and "smattn version" not in l]
open(sys.argv[2], "w").write("set -e\n" + "\n".join(lines).replace("/tmp/smattn", '"$DEST"') + "\n")
PY
if [ -d "$root/.git" ] || git -C "$root" rev-parse --git-dir >/dev/null 2>&1; then
  head=$(git -C "$root" rev-parse HEAD)
  if SMATTN_REPO=$root SMATTN_REF= DEST=$t/a sh "$t/install.sh" >"$t/err" 2>&1; then
    echo "test_gate_yml: an empty SMATTN_REF was accepted" >&2; exit 1
  fi
  grep -q "set SMATTN_REF" "$t/err" || { echo "test_gate_yml: no sentence for an empty SMATTN_REF" >&2; cat "$t/err" >&2; exit 1; }
  SMATTN_REPO=$root SMATTN_REF=$head DEST=$t/b sh "$t/install.sh" >"$t/out" 2>&1 ||
    { echo "test_gate_yml: the step cannot check out commit $head" >&2; cat "$t/out" >&2; exit 1; }
  [ "$(git -C "$t/b" rev-parse HEAD)" = "$head" ] || { echo "test_gate_yml: wrong commit checked out" >&2; exit 1; }
  echo "test_gate_yml: YAML parses, SMATTN_REF is a placeholder, the install step refuses it empty and checks out a commit: passed"
else
  echo "test_gate_yml: YAML parses and SMATTN_REF is a placeholder (no git checkout here to try the step): passed"
fi
