#!/usr/bin/env bash
# Dev machine, before a device_alt.sh run: alt/NAME from each BRANCH's
# kernels/, cli/ and tests/check_gpu_runtime.c (NAME: the branch without
# its "issue7-" prefix), replacing any alt/ trees there were; adds "/alt/"
# to .git/info/exclude once. Usage: bash tests/bench/alt_trees.sh BRANCH...
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -gt 0 ] || { echo "usage: alt_trees.sh BRANCH..." >&2; exit 2; }
grep -qxF "/alt/" .git/info/exclude || echo "/alt/" >> .git/info/exclude
rm -rf alt
for b in "$@"; do
  git rev-parse --verify -q "$b" > /dev/null || { echo "alt_trees.sh: no branch $b" >&2; exit 1; }
  d=alt/${b#issue7-}
  mkdir -p "$d"
  git archive "$b" kernels cli tests/check_gpu_runtime.c | tar -x -C "$d"
done
du -sh alt
