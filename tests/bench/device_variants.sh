#!/usr/bin/env bash
# GPU machine, one call: kernel variants of the working tree timed against
# it. Builds the working tree and every VARIANT (source trees, carried) at
# once; runs check_gpu_target and the tiny model's check_gpu_runtime case on
# each, all at once (a summary line each, logs in OUT/chk-*.txt); then
# bench-target on the synthetic 80B shape (ARGS, default 4K decode and
# verify T = 2 and 4, no prefill), the working tree and the variants in turn,
# ROUNDS times (default 2: the spread shows in the working tree's rows);
# then, with STEP=1 and before STOP seconds (default 420), the 80B-shaped
# drafters' bench-step (STEPARGS, default 4K batch 1 and 4) the same way.
#
#   [ARGS="..."] [ROUNDS=2] [STEP=1] [STEPARGS="..."] [STOP=420] \
#     bash tests/bench/device_variants.sh OUT VOCAB VARIANT...
#
# Carry .device-debs, .device-data (unpack tiny.tar.xz first: the tests read
# the tiny model; VOCAB: .device-data/dv.safetensors) and the VARIANTs. A
# variant's build uses this tree's .ci/device-build.sh and reads this tree's
# testdata.
set -uo pipefail
O=$1 V=$2
shift 2
mkdir -p "$O"
. tests/bench/device_lib.sh
(MTPQ_DEVICE_ENV_ONLY=1 . .ci/device-build.sh) || exit 1
export MTPQ_DEVICE_TARGETS="mtpq check_gpu_target check_gpu_runtime gen_fixture"
W=$PWD n=0 vb=()
for v in "$@"; do
  n=$((n + 1))
  rm -rf /tmp/var$n && cp -r "$v" /tmp/var$n && cp -r .device-debs /tmp/var$n/
  rm -rf /tmp/var$n/testdata && ln -sfn "$PWD/testdata" /tmp/var$n/testdata
  (cd /tmp/var$n && OUT=/tmp/var$n-out && mkdir -p $OUT && . "$W/.ci/device-build.sh") > "$O/var$n-build.txt" 2>&1 &
  vb+=($!)
done
dev_build "$O" || exit 1
n=0 builds=(./build-gpu) names=(new)
for p in "${vb[@]}"; do
  n=$((n + 1))
  if wait "$p"; then
    builds+=(/tmp/var$n/build-gpu) names+=("var$n")
  else
    echo "variant $n build failed"; tail -n 20 "$O/var$n-build.txt"
  fi
done
echo "built ${names[*]} at ${SECONDS}s"
pids=()
for i in "${!builds[@]}"; do
  b=$(cd "${builds[$i]}" && pwd) nm=${names[$i]}
  (timeout 240 "$b"/tests/check_gpu_target > "$O/chk-target-$nm.txt" 2>&1) & pids+=($!)
  (cd "$b" && CK_RUN_CASE=tiny timeout 240 ./tests/check_gpu_runtime > "$O/chk-runtime-$nm.txt" 2>&1) & pids+=($!)
done
wait "${pids[@]}"
for f in "$O"/chk-*.txt; do
  echo "$(basename "$f" .txt): $(grep -E '^[0-9]+%: Checks' "$f" | tail -1)"
  grep -E 'Failure|Error|:F:|:E:' "$f" | head -4
done
echo "checked at ${SECONDS}s"
read -r -a extra <<< "${ARGS:---context 4096 --prefill 0 --iters 20}"
for r in $(seq "${ROUNDS:-2}"); do
  for i in "${!builds[@]}"; do
    f="$O/bt-${names[$i]}-$r.txt"
    timeout 120 "${builds[$i]}"/mtpq bench-target --synthetic qwen3-next-80b "${extra[@]}" > "$f" 2>&1
    echo "bench-target ${names[$i]} round $r rc $? at ${SECONDS}s: $(awk '$2 == "decode" {printf "decode %s  ", $3} $2 == "verify" {printf "%s %s  ", $3, $4}' "$f")"
  done
done
[ "${STEP:-0}" = 1 ] || exit 0
[ $SECONDS -lt "${STOP:-420}" ] || { echo "no time left for bench-step"; exit 0; }
dev_fixture ./build-gpu /tmp/mtpq-var "$V" > "$O/fixture.txt" 2>&1 || { echo "fixture failed"; tail "$O/fixture.txt"; exit 1; }
echo "fixture at ${SECONDS}s"
read -r -a sx <<< "${STEPARGS:---context 4096 --batch 1 --batch 4}"
for r in $(seq "${ROUNDS:-2}"); do
  for i in "${!builds[@]}"; do
    [ $SECONDS -lt $((${STOP:-420} + 120)) ] || { echo "no time left"; exit 0; }
    f="$O/bs-${names[$i]}-$r.txt"
    dev_row "${builds[$i]}" /tmp/mtpq-var "$f" "${sx[@]}"
    echo "bench-step ${names[$i]} round $r rc $? at ${SECONDS}s"
    grep -E " 4096 " "$f" | cut -c1-80
  done
done
