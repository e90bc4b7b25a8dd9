#!/usr/bin/env bash
# GPU-machine run for issue 7's tuning: builds, runs the gpu runtime tests
# (MTPQ_TESTS=0: not), times the mtpq drafter's step at 4K batch 1 by
# default and with MTPQ_CUDA_PDL=0 (MTPQ_CUDA_PREFETCH=1, ..._KV_MB and
# MTPQ_CUDA_GRAPHS=0 by hand), records one draft call's kernels with ncu
# (serialised: each kernel's duration alone; MTPQ_NCU=0: not; MTPQ_NCU_DETAIL=1
# adds stall reasons, instructions and memory throughput; MTPQ_ROWS=0 skips
# the timed rows), runs bench-acceptance on the tiny
# model (MTPQ_ACCEPT=0: not) and, with MTPQ_FULL=1, the full bench-step table
# (MTPQ_32K_B8=0 leaves out 32K batch 8, the slowest to prefill) and
# tests/bench/chain_floor.cu's table on the same card (MTPQ_CHAIN=0: not;
# machines lent as the same card measured 6% apart). Logs in
# $OUT. Carry [".device-debs", "dv.safetensors"]: the draft vocabulary is
# built before the run on the dev machine (the tokenizer does not fit the
# device transfer): mtpq build-vocab -t testdata/tiny-qwen3next/model/tokenizer.json
#   -c testdata/tiny-qwen3next/counts/code_train.tsv
#   -c testdata/tiny-qwen3next/counts/prose_train.tsv:10 -n 98304 --out dv
# (dv.safetensors is git-ignored; MTPQ_DEVICE_VOCAB names another file).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. .ci/device-build.sh || exit 1
. tests/bench/device_lib.sh
set +e +o pipefail
M=./build-gpu/mtpq
dev_card
dev_fixture ./build-gpu
if [ "${MTPQ_TESTS:-1}" = 1 ]; then
  (cd build-gpu && timeout 500 ctest -R check_gpu_runtime --output-on-failure) > "$OUT/gpu-tests.txt" 2>&1
  grep -E 'tests passed|tests failed' "$OUT/gpu-tests.txt" || tail -3 "$OUT/gpu-tests.txt"
fi
# MTPQ_ROW_VARIANTS: the rows between the default's two, each LABEL:VAR=VALUE[,VAR=VALUE...]
[ "${MTPQ_ROWS:-1}" = 1 ] && {
dev_row ./build-gpu default
for v in ${MTPQ_ROW_VARIANTS:-no-pdl:MTPQ_CUDA_PDL=0}; do
  dev_row ./build-gpu "${v%%:*}" $(echo "${v#*:}" | tr ',' ' ')
done
dev_row ./build-gpu default-again
} | tee "$OUT/variants.txt"
# MTPQ_SASS=REGEX: the disassembly of the kernels whose mangled names match, in $OUT/sass.txt
if [ -n "${MTPQ_SASS:-}" ]; then
  o=$(find build-gpu -name runtime_cuda.cu.o | head -1)
  for f in $(cuobjdump -elf "$o" 2>/dev/null | grep -oE '\.text\.[A-Za-z0-9_]+' | sed 's/^\.text\.//' | grep -E "$MTPQ_SASS" | sort -u); do
    cuobjdump -sass -fun "$f" "$o"
  done > "$OUT/sass.txt" 2>&1
  grep -oE '(LDS|HMMA|UBLKCP|SYNCS|BAR|LDG|F2FP)[A-Z0-9._]*' "$OUT/sass.txt" | sort | uniq -c
fi
[ "${MTPQ_NCU:-1}" = 1 ] && dev_ncu ./build-gpu tree
[ "${MTPQ_NCU_DETAIL:-0}" = 1 ] && dev_ncu_detail $M # why the slow kernels are slow
[ -f "$OUT/variants.txt" ] && { echo; cat "$OUT/variants.txt"; }
if [ "${MTPQ_ACCEPT:-1}" = 1 ]; then
  TM=testdata/tiny-qwen3next
  $M quantize $TM/model --vocab ${MTPQ_DEVICE_VOCAB:-dv.safetensors} --out /tmp/tq --expert-input-scale 0.1667 --force > /dev/null
  $M bench-acceptance --backend cuda --target $TM/model --traces $TM/traces.safetensors --drafter /tmp/tq \
    > "$OUT/accept-cuda.txt" 2>&1; tail -4 "$OUT/accept-cuda.txt"
fi
if [ "${MTPQ_FULL:-0}" = 1 ] && [ "${MTPQ_CHAIN:-1}" = 1 ]; then
  nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/chain_floor tests/bench/chain_floor.cu &&
    timeout 60 /tmp/chain_floor > "$OUT/chain-floor.txt" 2>&1; cat "$OUT/chain-floor.txt"
fi
if [ "${MTPQ_FULL:-0}" = 1 ]; then
  timeout 150 $M bench-step --backend cuda --target $T --drafter /tmp/q80 --context 4096 --batch 1 --batch 2 \
    --batch 4 --batch 8 --iters 30 --target-step-ms 20 --mal 2.67 2>&1 | tee "$OUT/step-4096.txt" | grep -v est
  B8=--batch; [ "${MTPQ_32K_B8:-1}" = 1 ] || B8=
  timeout 150 $M bench-step --backend cuda --target $T --drafter /tmp/q80 --context 32768 --batch 1 \
    ${B8:+--batch 8} --iters 20 --target-step-ms 20 --mal 2.67 2>&1 | tee "$OUT/step-32768.txt" | grep -v est
fi
