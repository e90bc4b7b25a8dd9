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
export MTPQ_DEVICE_TARGETS="mtpq check_gpu_target check_gpu_runtime gen_fixture"
dev_build_all "$O" "$@" || exit 1
builds=(./build-gpu) names=(new)
for n in "${!DEV_OK[@]}"; do
  [ "${DEV_OK[$n]}" = 1 ] && builds+=(/tmp/var$n/build-gpu) names+=("var$n")
done
echo "built ${names[*]} at ${SECONDS}s"
pids=()
for i in "${!builds[@]}"; do
  b=$(cd "${builds[$i]}" && pwd) nm=${names[$i]}
  (timeout 240 "$b"/tests/check_gpu_target > "$O/chk-target-$nm.txt" 2>&1) & pids+=($!)
  (cd "$b" && CK_RUN_CASE=tiny timeout 240 ./tests/check_gpu_runtime > "$O/chk-runtime-$nm.txt" 2>&1) & pids+=($!)
done
wait "${pids[@]}"
dev_summary "$O"/chk-*.txt
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
