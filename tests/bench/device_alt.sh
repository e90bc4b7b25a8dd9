#!/usr/bin/env bash
# GPU-machine run: time other versions of kernels/ (and cli/) beside the
# working tree's, e.g. branches not merged. On the dev machine, before the
# run: mkdir -p alt/NAME && git archive BRANCH kernels cli | tar -x -C alt/NAME
# (alt/ is git-ignored only by .git/info/exclude: add "/alt/" there). Each
# alt/NAME is built as a copy of this tree with its files laid over, its gpu
# runtime tests run (MTPQ_ALT_TESTS=0: none; MTPQ_ALT_NOTEST="NAME ...": not
# those), and its 4K batch-1 bench-step rows printed beside the working
# tree's (plus --profile with MTPQ_ALT_PROFILE=1). Carry [".device-debs",
# "dv.safetensors", "alt"].
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
ROOT=$PWD
. .ci/device-build.sh || exit 1
set +e +o pipefail
T=/tmp/t80
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader; } | tee "$OUT/card.txt"
./build-gpu/tests/gen_fixture $T --nvfp4-target > /dev/null &&
  ./build-gpu/mtpq quantize $T --vocab ${MTPQ_DEVICE_VOCAB:-dv.safetensors} --out /tmp/q80 --gpu --force | tail -1
row() { # build dir, label, env...
  local b=$1 label=$2; shift 2
  env "$@" timeout 90 $b/mtpq bench-step --backend cuda --target $T --drafter /tmp/q80 --context 4096 --iters 40 \
    ${MTPQ_ALT_PROFILE:+--profile} > "$OUT/alt-$label.txt" 2>&1
  printf '%-22s %s\n' "$label" "$(grep -E '^(stock|/tmp/q80)' "$OUT/alt-$label.txt" | awk '{printf "%s=%s us  ", $1, $(NF-6)}')"
}
if [ "${MTPQ_ALT_TESTS:-1}" = 1 ]; then
  (cd build-gpu && timeout 300 ctest -R check_gpu_runtime --output-on-failure) > "$OUT/tree-tests.txt" 2>&1
  echo "tree: $(grep -E 'tests passed|tests failed' "$OUT/tree-tests.txt")"
fi
row "$ROOT/build-gpu" tree | tee "$OUT/alt.txt"
for a in alt/*/; do
  [ -d "$a" ] || continue # no alt/ trees: the working tree's row only
  name=$(basename "$a") dir=/tmp/alt-$name
  rm -rf "$dir" && mkdir -p "$dir" && tar -C "$ROOT" --exclude=./build-gpu --exclude=./alt -cf - . | tar -C "$dir" -xf -
  cp -r "$a". "$dir"/
  (cd "$dir" && OUT=$OUT/$name && mkdir -p $OUT && . .ci/device-build.sh) || { echo "$name: build failed"; continue; }
  if [ "${MTPQ_ALT_TESTS:-1}" = 1 ] && [[ " ${MTPQ_ALT_NOTEST:-} " != *" $name "* ]]; then
    (cd "$dir/build-gpu" && timeout 300 ctest -R check_gpu_runtime --output-on-failure) > "$OUT/alt-$name-tests.txt" 2>&1
    echo "$name: $(grep -E 'tests passed|tests failed' "$OUT/alt-$name-tests.txt")"
  fi
  row "$dir/build-gpu" "$name" | tee -a "$OUT/alt.txt"
  [ -n "${MTPQ_ALT_PROFILE:-}" ] && grep -A20 '^profile: /tmp/q80' "$OUT/alt-$name.txt" | head -20
done
cat "$OUT/alt.txt"
