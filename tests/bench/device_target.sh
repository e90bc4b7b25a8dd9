#!/usr/bin/env bash
# GPU machine, one call: the target model's CUDA backend against its CPU
# reference (check_gpu_target), then bench-target on the synthetic
# Qwen3-Next-80B-A3B shape in NVIDIA's NVFP4 layout (made in device memory)
# at 4K and 32K, verify T = 2 and 4, prefill of 4K.
#
#   bash tests/bench/device_target.sh OUT
#
# OUT: where the logs go (the device tool's $OUT). Carry .device-debs.
set -uo pipefail
O=$1
mkdir -p "$O"
( OUT=$O; . .ci/device-build.sh ) > "$O/build.txt" 2>&1 || { echo "build failed"; tail -40 "$O/build.txt" "$O"/build.log; exit 1; }
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
. tests/bench/device_lib.sh
dev_card "$O"
echo "built at ${SECONDS}s"
timeout "${MTPQ_TARGET_TEST_S:-200}" ./build-gpu/tests/check_gpu_target > "$O/check_gpu_target.txt" 2>&1
echo "check_gpu_target rc $? at ${SECONDS}s"
grep -E "rel. err|Checks|Failure|Error|error" "$O/check_gpu_target.txt" | head -60
timeout "${MTPQ_TARGET_BENCH_S:-300}" ./build-gpu/mtpq bench-target --synthetic qwen3-next-80b ${MTPQ_BENCH_ARGS:-} \
  > "$O/bench-target.txt" 2>&1
echo "bench-target rc $? at ${SECONDS}s"
cat "$O/bench-target.txt"
