#!/usr/bin/env bash
# GPU-machine run for issue 7: bench-step on the synthetic 80B-shaped target
# (gen_fixture defaults) and its mtpq drafter, batch 1/2/4/8 at context 4K
# and 32K (with a per-kernel profile at 4K batch 1); the gpu tests (CUDA vs
# CPU backend on the tiny model and random small shapes); bench-acceptance
# on the tiny model's traces with the CUDA backend. Logs in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. .ci/device-build.sh || exit 1
set +e +o pipefail
M=./build-gpu/mtpq G=./build-gpu/tests/gen_fixture T=/tmp/t80 TM=testdata/tiny-qwen3next
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader; nproc; } | tee "$OUT/card.txt"
# The draft vocabulary is built before the run (the tokenizer does not fit
# the device transfer): mtpq build-vocab -t $TM/model/tokenizer.json
#   -c $TM/counts/code_train.tsv -c $TM/counts/prose_train.tsv:10 -n 98304 --out dv
# (dv.safetensors is git-ignored: carry it with the run, carry [".device-debs", "dv.safetensors"])
DV=${MTPQ_DEVICE_VOCAB:-dv.safetensors}
$G $T --nvfp4-target > /dev/null && $M quantize $T --vocab $DV --out /tmp/q80 --gpu | tail -1
$M quantize $TM/model --vocab $DV --out /tmp/tq --expert-input-scale 0.1667 > /dev/null
if [ "${MTPQ_PROFILE:-1}" = 1 ]; then
  timeout 120 $M bench-step --backend cuda --target $T --drafter /tmp/q80 --context 4096 --iters 50 --profile \
    2>&1 | tee "$OUT/step-4096-b1.txt"
  MTPQ_CUDA_GRAPHS=0 timeout 60 $M bench-step --backend cuda --target $T --drafter /tmp/q80 --context 4096 \
    --iters 50 2>&1 | tee "$OUT/step-4096-b1-nographs.txt"
fi
(cd build-gpu && timeout 300 ctest -R check_gpu_runtime --output-on-failure) > "$OUT/gpu-tests.txt" 2>&1
tail -5 "$OUT/gpu-tests.txt"
[ "${MTPQ_ACCEPT:-1}" = 1 ] && /usr/bin/time -f "bench-acceptance cuda: %e s" $M bench-acceptance --backend cuda \
  --target $TM/model --traces $TM/traces.safetensors --drafter /tmp/tq 2>&1 | tee "$OUT/accept-cuda.txt" | tail -4
timeout 150 $M bench-step --backend cuda --target $T --drafter /tmp/q80 --context 4096 --batch 1 --batch 2 \
  --batch 4 --batch 8 --iters 30 --target-step-ms 20 --mal 2.67 2>&1 | tee "$OUT/step-4096.txt"
timeout ${MTPQ_T32K:-150} $M bench-step --backend cuda --target $T --drafter /tmp/q80 --context 32768 --batch 1 \
  --batch 8 --iters 20 --target-step-ms 20 --mal 2.67 2>&1 | tee "$OUT/step-32768.txt"
