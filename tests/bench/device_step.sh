#!/usr/bin/env bash
# GPU-machine run for issue 7: the CUDA backend's acceptance on the tiny
# model's traces (CLI, stock + quantized), then bench-step on the synthetic
# 80B-shaped target (gen_fixture defaults) and its mtpq drafter at context
# 4K and 32K. Logs in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. .ci/device-build.sh || exit 1
set +e +o pipefail
M=./build-gpu/mtpq G=./build-gpu/tests/gen_fixture T=/tmp/t80 TM=testdata/tiny-qwen3next
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } | tee "$OUT/card.txt"
# The draft vocabulary is built before the run (the tokenizer does not fit
# the device transfer): mtpq build-vocab -t $TM/model/tokenizer.json
#   -c $TM/counts/code_train.tsv -c $TM/counts/prose_train.tsv:10 -n 98304 --out dv
DV=${MTPQ_DEVICE_VOCAB:-dv.safetensors}
$M quantize $TM/model --vocab $DV --out /tmp/tq --expert-input-scale 0.1667 > /dev/null
for b in cpu cuda; do
  /usr/bin/time -f "bench-acceptance $b: %e s" $M bench-acceptance --backend $b --target $TM/model --drafter /tmp/tq \
    --traces $TM/traces.safetensors 2>&1 | tee "$OUT/accept-$b.txt"
done
$G $T --nvfp4-target > /dev/null && $M quantize $T --vocab $DV --out /tmp/q80 --gpu | tail -1
for c in 4096 32768; do
  timeout 150 $M bench-step --backend cuda --target $T --drafter /tmp/q80 --context $c --iters 50 \
    --target-step-ms 20 --mal 2.67 2>&1 | tee "$OUT/step-$c.txt"
done
