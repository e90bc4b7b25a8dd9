#!/usr/bin/env bash
# GPU machine: one call for a round's final tree (issue 7's closing numbers).
# Builds the working tree (build-gpu), makes the 80B-shaped fixture and its
# mtpq drafter, then: batch-1 rows at 4K (the tree, each MTPQ_ROW_VARIANTS
# entry as in device_round.sh, the tree again); the table, batch 1, 2, 4
# and 8 at 4K and 32K (bench-step --iters 20, --target-step-ms 20 --mal
# 2.67); bench-acceptance --backend cuda on the tiny model; last the whole
# check_gpu_runtime, its cases split over processes run at once (the tiny
# model's, and the random case a shape each) in what is left of the call,
# nothing timed after them.
# Every summary goes into $OUT/final.txt (the device transfer brings back a
# few files only), the logs into $OUT/final.tgz. Carry [".device-debs",
# "dv.safetensors"].
set -uo pipefail
FIN=${OUT:-/tmp/out}
OUT=/tmp/final-out
rm -rf "$OUT" && mkdir -p "$OUT"
{
. .ci/device-build.sh > "$OUT/build.txt" 2>&1 || { echo "build failed"; tail -30 "$OUT/build.txt"; exit 1; }
. tests/bench/device_lib.sh
set +e
dev_card
dev_fixture ./build-gpu
dev_row ./build-gpu tree
for v in ${MTPQ_ROW_VARIANTS:-}; do # LABEL:VAR=VALUE[,VAR=VALUE...] (CTX=N, BATCH=N: device_lib.sh's variant_env)
  variant_env "${v#*:}"
  CTX=$vctx BATCH=$vbatch WARM=$vwarm dev_row ./build-gpu "${v%%:*}" $venv
done
dev_row ./build-gpu tree-again
timeout 420 ./build-gpu/mtpq bench-step --backend cuda --target $T --drafter /tmp/q80 --context 4096 \
  --context 32768 --batch 1 --batch 2 --batch 4 --batch 8 --iters 20 --target-step-ms 20 --mal 2.67 \
  > "$OUT/table.txt" 2>&1
echo "table (rc $?):"
cat "$OUT/table.txt"
TM=testdata/tiny-qwen3next
./build-gpu/mtpq quantize $TM/model --vocab dv.safetensors --out /tmp/tq --expert-input-scale 0.1667 --force > /dev/null
./build-gpu/mtpq bench-acceptance --backend cuda --target $TM/model --traces $TM/traces.safetensors --drafter /tmp/tq \
  > "$OUT/accept-cuda.txt" 2>&1
echo "bench-acceptance --backend cuda (rc $?):"
cat "$OUT/accept-cuda.txt"
# the tests get what is left of the call (MTPQ_FINAL_LIMIT seconds from the start, default 585)
left=$((${MTPQ_FINAL_LIMIT:-585} - SECONDS))
echo "gpu tests: $left s left at $(date -u +%T)"
cd build-gpu
pids=()
(CK_RUN_CASE=tiny timeout $left ./tests/check_gpu_runtime > "$OUT/t-tiny.txt" 2>&1) & pids+=($!)
for s in 0 1 2 3 4 5 6 7 8 9 10 long; do
  (CK_RUN_CASE=random MTPQ_GPU_SHAPES=$s timeout $left ./tests/check_gpu_runtime > "$OUT/t-$s.txt" 2>&1) & pids+=($!)
done
wait "${pids[@]}"
cd ..
for f in "$OUT"/t-*.txt; do
  echo "gpu tests $(basename "$f" .txt): $(grep -E '^[0-9]+%: Checks' "$f" | tail -1)"
  grep -E 'relative error' "$f" | cut -c1-160 | tail -3
  grep -E 'Failure|Error' "$f" | head -3
done
} 2>&1 | tee "$FIN/final.txt"
tar -C "$OUT" -czf "$FIN/final.tgz" .
