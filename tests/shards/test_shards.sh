#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_shards.sh: a sharded run merged equals the unsharded run (README "At scale"). The
# quick suite with the built-in kernel in 3 shards through GNU parallel, run by the recipe
# examples/at-scale/parallel.sh on this machine, then merged: the same cases in the same
# order with the same verdicts and categories as one unsharded run; `gen --shard` splits
# the suite's case directories into a partition; the Slurm script and the Kubernetes
# manifest are syntax-checked. Usage: test_shards.sh SMATTN_CLI
set -euo pipefail
cli=$(realpath "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
py=$(test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_shards: FAILED: $*" >&2; exit 1; }

# 1. conform in 3 shards through GNU parallel, merged, against one unsharded run
"$cli" conform --suite quick --json "$tmp/whole.json" >"$tmp/whole.txt" || fail "unsharded conform: exit $?"
SSH=0 JOBS=2 N=3 SUITE=quick KERNEL=builtin OUT="$tmp/shards" SMATTN="$cli" \
  "$root/examples/at-scale/parallel.sh" >"$tmp/merge.txt" || fail "parallel.sh: exit $? ($(tail -3 "$tmp/merge.txt"))"
"$py" - "$tmp/whole.json" "$tmp/shards/merged.json" <<'PY' || fail "the merged report differs from the unsharded run"
import json, sys
a, m = (json.load(open(p)) for p in sys.argv[1:3])
key = lambda r: [(c["name"], c["index"], c["category"], c["status"], c["features"], c["shape"]) for c in r["cases"]]
assert key(a) == key(m), "cases, order or verdicts differ"
assert a["verdict"] == m["verdict"] and a["summary"] == m["summary"], (a["summary"], m["summary"])
assert set(a["categories"]) == set(m["categories"])
for cat, v in a["categories"].items():
    w = m["categories"][cat]
    assert all(v[k] == w[k] for k in ("cases", "passed", "failed", "skipped")), cat
assert m["shard"] == {"index": 0, "count": 1} and "missing_shards" not in m
print("test_shards: %d cases in 3 shards merged = the unsharded run (%s)" % (len(a["cases"]), m["verdict"]))
PY
grep -q "<testsuites" "$tmp/shards/merged.xml" || fail "no JUnit file from the merge"

# 1b. the documents that count the quick suite's cases say what it has
"$py" - "$tmp/whole.json" "$root" <<'PY' || fail "a document miscounts the quick suite"
import json, re, sys
cases = json.load(open(sys.argv[1]))["cases"]
# The attention cases; the merge and backward cases (a kernel with a merge or backward
# entry, as the built-in one) are counted apart.
n = sum(c["category"] not in ("merge", "backward") for c in cases)
merges = sum(c["category"] == "merge" for c in cases)
backwards = sum(c["category"] == "backward" for c in cases)
root = sys.argv[2]
claims = [("README.md", r"`smattn conform --suite quick` \((\d+) cases", n),
          ("README.md", r"`smattn conform --suite quick` \(\d+ cases, and (\d+) merge", merges),
          ("conform/README.md", r"quick: (\d+) small cases", n),
          ("conform/README.md", r"quick: \d+ small cases.*?plus (\d+) merge cases", merges),
          ("conform/README.md", r"quick: \d+ small cases.*?plus (\d+) backward cases", backwards),
          ("conform/README.md", r"The quick suite has (\d+) backward cases", backwards),
          ("man/smattn.1", r"quick \(the default\): (\d+) small cases", n),
          ("man/smattn.1", r"quick \(the default\): \d+ small cases.*?(\d+)\s+backward cases", backwards),
          ("man/smattn.1", r"SPEC 10; (\d+) cases in quick", backwards)]
for path, pat, want in claims:
    m = re.search(pat, open(root + "/" + path).read())
    assert m, "%s: no count of the quick suite (pattern %s)" % (path, pat)
    assert int(m.group(1)) == want, "%s says %s, the quick suite has %d (%s)" % (path, m.group(1), want, pat)
PY

# 2. gen --shard: the three shards' case directories are the unsharded gen's, once each
"$cli" gen --suite quick "$tmp/gen" >/dev/null
for i in 0 1 2; do "$cli" gen --suite quick --shard "$i/3" "$tmp/gen$i" >/dev/null; done
(cd "$tmp" && ls gen | grep -v manifest.json | sort) >"$tmp/names"
(cd "$tmp" && for i in 0 1 2; do ls "gen$i" | grep -v manifest.json; done | sort) >"$tmp/names3"
cmp -s "$tmp/names" "$tmp/names3" || fail "gen's shards are not a partition of the suite"
[ "$(sort "$tmp/names3" | uniq -d | wc -l)" = 0 ] || fail "a case is in two of gen's shards"

# 3. the other recipes, syntax-checked
bash -n "$root/examples/at-scale/slurm-array.sbatch"
bash -n "$root/examples/at-scale/fuzz-campaign.sh"
grep -q '^#SBATCH --array=0-15$' "$root/examples/at-scale/slurm-array.sbatch" &&
  grep -q '^N=16$' "$root/examples/at-scale/slurm-array.sbatch" || fail "slurm-array.sbatch: --array and N disagree"
"$py" - "$root/examples/at-scale/k8s-indexed-job.yaml" <<'PY' || fail "k8s-indexed-job.yaml"
import sys, yaml
j = yaml.safe_load(open(sys.argv[1]))
assert j["apiVersion"] == "batch/v1" and j["kind"] == "Job", "not a batch/v1 Job"
s = j["spec"]
assert s["completionMode"] == "Indexed", "not an Indexed Job"
n = s["completions"]
args = " ".join(s["template"]["spec"]["containers"][0]["args"])
assert '--shard "$JOB_COMPLETION_INDEX/%d"' % n in args, "--shard's N is not completions"
assert "--json" in args
print("test_shards: the Slurm script and the Kubernetes manifest check out")
PY
echo "test_shards: passed"
