#!/usr/bin/env bash
# GPU machine, one call: the target model's CUDA backend against its CPU
# reference (check_gpu_target), the live loop on the tiny model (its mtpq
# drafter quantized on the GPU with the draft vocabulary VOCAB, then
# bench-decode at k = 1..4: exit 9 if any output differs from the output
# without speculation; then sampled at k = 3), and bench-target on the synthetic
# Qwen3-Next-80B-A3B shape in NVIDIA's NVFP4 layout (made in device memory)
# at 4K and 32K, verify T = 2 and 4, prefill of 4K.
#
#   bash tests/bench/device_target.sh OUT VOCAB
#
# OUT: where the logs go (the device tool's $OUT); VOCAB: a draft
# vocabulary (e.g. dv.safetensors from mtpq build-vocab, carried). Carry
# .device-debs. MTPQ_BENCH_ARGS: more bench-target options (--profile).
set -uo pipefail
O=$1 V=$2 T=testdata/tiny-qwen3next
mkdir -p "$O"
. tests/bench/device_lib.sh
dev_build "$O" || exit 1
echo "built at ${SECONDS}s"
timeout 200 ./build-gpu/tests/check_gpu_target > "$O/check_gpu_target.txt" 2>&1
echo "check_gpu_target rc $? at ${SECONDS}s"
grep -E "rel. err|Checks|F:" "$O/check_gpu_target.txt" | head -40
./build-gpu/mtpq quantize -q $T/model --vocab "$V" --out "$O/q" --gpu --force --expert-input-scale 0.1667
for k in 1 2 3 4; do
  timeout 100 ./build-gpu/mtpq bench-decode --backend cuda --target $T/model --drafter "$O/q" \
    --prompts $T/traces.safetensors -n 96 -k $k > "$O/decode-k$k.txt" 2>&1
  echo "bench-decode k=$k rc $?"
  cat "$O/decode-k$k.txt"
done
timeout 100 ./build-gpu/mtpq bench-decode --backend cuda --target $T/model --drafter "$O/q" \
  --prompts $T/traces.safetensors -n 96 -k 3 --temperature 0.8 --top-p 0.95 --seed 1 > "$O/decode-sampled.txt" 2>&1
echo "bench-decode sampled rc $?"
cat "$O/decode-sampled.txt"
rm -rf "$O/q"
timeout 200 ./build-gpu/mtpq bench-target --synthetic qwen3-next-80b --iters 30 ${MTPQ_BENCH_ARGS:-} \
  > "$O/bench-target.txt" 2>&1
echo "bench-target rc $? at ${SECONDS}s"
cat "$O/bench-target.txt"
