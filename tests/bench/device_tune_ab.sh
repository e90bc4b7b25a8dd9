#!/usr/bin/env bash
# GPU machine, one call: candidate paths selected by MTPQ_CUDA_TUNE (default
# "tattn=1 tattn=1,dmv=1": the target attention's tensor-core form,
# ledger 70, and that with the dense products of few rows a warp a row,
# ledger 71; three runs a round, sized for one 10-minute call, not yet timed)
# against the defaults, in one build. check_gpu_target first (its
# test_attn_mma and test_dmv run the cases with those keys), then
# bench-target on the synthetic 80B shape (ARGS, default 4K and 32K, decode
# and verify T = 2 and 4, no prefill) with the defaults and with each of
# TUNES in turn, ROUNDS times (default 2); with BASE (a source tree,
# carried: e.g. main before a change) its defaults too, in the same turns.
#
#   [TUNES="..."] [ARGS="..."] [ROUNDS=2] [BASE=DIR] bash tests/bench/device_tune_ab.sh OUT
#
# Carry .device-debs and .device-data (unpack tiny.tar.xz first: the tests
# read the tiny model).
set -uo pipefail
O=$1
mkdir -p "$O"
. tests/bench/device_lib.sh
export MTPQ_DEVICE_TARGETS="mtpq check_gpu_target"
if [ -n "${BASE:-}" ]; then dev_build_all "$O" "$BASE" || exit 1; else dev_build "$O" || exit 1; fi
echo "built at ${SECONDS}s"
timeout 240 ./build-gpu/tests/check_gpu_target > "$O/chk-target.txt" 2>&1
echo "check_gpu_target rc $? at ${SECONDS}s"
dev_summary "$O/chk-target.txt"
grep -E "attention|tattn|dmv" "$O/chk-target.txt" | head -40
read -r -a extra <<< "${ARGS:---context 4096 --context 32768 --prefill 0 --iters 20}"
read -r -a tunes <<< "${TUNES:-tattn=1 tattn=1,dmv=1}"
runs=("defaults ./build-gpu")
for x in "${tunes[@]}"; do runs+=("$x ./build-gpu"); done
[ -n "${BASE:-}" ] && [ "${DEV_OK[1]:-0}" = 1 ] && runs+=("base /tmp/var1/build-gpu")
for r in $(seq "${ROUNDS:-2}"); do
  for x in "${runs[@]}"; do
    read -r nm b <<< "$x"
    f="$O/bt-${nm//[=,]/_}-$r.txt"
    env=(env)
    [ "$nm" = defaults ] || [ "$nm" = base ] || env+=("MTPQ_CUDA_TUNE=$nm")
    "${env[@]}" timeout 150 "$b"/mtpq bench-target --synthetic qwen3-next-80b "${extra[@]}" > "$f" 2>&1
    echo "bench-target $nm round $r rc $? at ${SECONDS}s:"
    awk '$2 == "decode" || $2 == "verify" {print "  " $0}' "$f"
  done
done
