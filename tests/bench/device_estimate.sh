#!/usr/bin/env bash
# GPU machine, one call: the decode estimate with a measured target step.
# The 80B-shaped drafters (tests/gen_fixture --nvfp4-target and its mtpq
# drafter with the draft vocabulary VOCAB), bench-step at 4K batch 1 with
# the target's verify step measured on the synthetic Qwen3-Next-80B-A3B
# (NVIDIA's NVFP4 layout, in device memory) for MAL.
#
#   bash tests/bench/device_estimate.sh OUT WORK VOCAB MAL
set -uo pipefail
O=$1 W=$2 V=$3 MAL=$4
mkdir -p "$O" "$W"
. tests/bench/device_lib.sh
dev_build "$O" || exit 1
dev_fixture ./build-gpu "$W" "$V" > "$O/fixture.txt" 2>&1 || { echo "fixture failed"; tail "$O/fixture.txt"; exit 1; }
echo "fixture at ${SECONDS}s"
timeout 240 ./build-gpu/mtpq bench-step --backend cuda --target "$W/t80" --drafter "$W/q80" --context 4096 \
  --iters 40 -k 3 --target-model synthetic:qwen3-next-80b --mal "$MAL" 2>&1 | tee "$O/estimate.txt"
echo "bench-step rc $? at ${SECONDS}s"
