#!/usr/bin/env bash
# GPU-machine run: time other versions of kernels/ (and cli/) beside the
# working tree's, e.g. branches not merged. On the dev machine, before the
# run: bash tests/bench/alt_trees.sh BRANCH... (alt/NAME from each branch;
# alt/ is git-ignored only by .git/info/exclude, which it sees to). Each
# alt/NAME is a copy of this tree with its files laid over; all are built at
# once (the single CUDA translation unit of each is the long pole), their gpu
# runtime tests run at once on the one GPU (MTPQ_ALT_TESTS=0: none;
# MTPQ_ALT_NOTEST="NAME ...": not those; nothing is timed meanwhile), then
# each tree's 4K batch-1 bench-step rows are timed one after another (plus
# --profile with MTPQ_ALT_PROFILE=1). Carry [".device-debs",
# "dv.safetensors", "alt"].
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
ROOT=$PWD
. .ci/device-build.sh || exit 1 # also unpacks the packages the other builds use
. tests/bench/device_lib.sh
set +e +o pipefail
dev_card
names=()
dev_alt_builds # (no alt/ trees: the working tree's rows only)
dev_fixture ./build-gpu
wait
built=()
for name in "${names[@]}"; do
  if [ -x "/tmp/alt-$name/build-gpu/mtpq" ]; then built+=("$name"); else echo "$name: build failed"; tail -20 "$OUT/alt-$name-build.txt"; fi
done
gputest() { # build dir, label
  (cd "$1" && timeout 400 ctest -R check_gpu_runtime --output-on-failure) > "$OUT/$2-tests.txt" 2>&1
}
if [ "${MTPQ_ALT_TESTS:-1}" = 1 ]; then
  gputest build-gpu tree &
  for name in "${built[@]}"; do
    [[ " ${MTPQ_ALT_NOTEST:-} " == *" $name "* ]] || gputest "/tmp/alt-$name/build-gpu" "$name" &
  done
  wait
  for f in "$OUT"/*-tests.txt; do echo "$(basename "$f" -tests.txt): $(grep -E 'tests passed|tests failed' "$f")"; done
fi
ROW_PROFILE=${MTPQ_ALT_PROFILE:-}
dev_row "$ROOT/build-gpu" tree | tee "$OUT/alt.txt"
for name in "${built[@]}"; do
  dev_row "/tmp/alt-$name/build-gpu" "$name" | tee -a "$OUT/alt.txt"
  [ -n "$ROW_PROFILE" ] && grep -A20 '^profile: /tmp/q80' "$OUT/row-$name.txt" | head -20
done
dev_row "$ROOT/build-gpu" tree-again | tee -a "$OUT/alt.txt" # drift over the run
cat "$OUT/alt.txt"
