#!/usr/bin/env bash
# GPU machine, one call: the target attention's tensor-core form
# (MTPQ_CUDA_TUNE=tattn=1, kernels/cuda/k_tattn.cu, ledger 70) against the
# default, in one build. check_gpu_target first (its test_attn_mma runs every
# case with tattn=1, the attention cases also with long splits), then
# bench-target on the synthetic 80B shape (ARGS, default 4K and 32K, decode
# and verify T = 2 and 4, no prefill) with the default and with tattn=1 in
# turn, ROUNDS times (default 2); with BASE (a source tree, carried: e.g.
# main before a change) its default too, in the same turns.
#
#   [ARGS="..."] [ROUNDS=2] [BASE=DIR] bash tests/bench/device_tattn.sh OUT
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
grep -E "attention|tattn" "$O/chk-target.txt" | head -30
read -r -a extra <<< "${ARGS:---context 4096 --context 32768 --prefill 0 --iters 20}"
runs=("default ./build-gpu" "tattn=1 ./build-gpu")
[ -n "${BASE:-}" ] && [ "${DEV_OK[1]:-0}" = 1 ] && runs+=("base /tmp/var1/build-gpu")
for r in $(seq "${ROUNDS:-2}"); do
  for x in "${runs[@]}"; do
    read -r nm b <<< "$x"
    f="$O/bt-${nm%%=*}-$r.txt"
    env=(env); [ "$nm" = "tattn=1" ] && env+=(MTPQ_CUDA_TUNE=tattn=1)
    "${env[@]}" timeout 150 "$b"/mtpq bench-target --synthetic qwen3-next-80b "${extra[@]}" > "$f" 2>&1
    echo "bench-target $nm round $r rc $? at ${SECONDS}s:"
    awk '$2 == "decode" || $2 == "verify" {print "  " $0}' "$f"
  done
done
