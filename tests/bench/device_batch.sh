#!/usr/bin/env bash
# GPU machine, one call: the batched live loop (issue 49) on the CUDA
# backend: check_gpu_target (its batch test: batch 4 equals plain greedy
# sequence by sequence with both drafters), then bench-decode on the tiny
# model at k = 3, batch 1 and batch 4 (--json; exit 9 if any output differs
# from the output without speculation).
#
#   bash tests/bench/device_batch.sh OUT VOCAB
#
# Carry .device-debs, the tiny model's shards (.device-data/tiny.tar.xz,
# unpacked first when the tree is slimmed) and VOCAB (a draft vocabulary).
set -uo pipefail
O=$1 V=$2 T=testdata/tiny-qwen3next
mkdir -p "$O"
. tests/bench/device_lib.sh
dev_build "$O" || exit 1
echo "built at ${SECONDS}s"
timeout 300 ./build-gpu/tests/check_gpu_target > "$O/check_gpu_target.txt" 2>&1
echo "check_gpu_target rc $? at ${SECONDS}s"
grep -E "batch|Checks|F:" "$O/check_gpu_target.txt" | head -20
./build-gpu/mtpq quantize -q $T/model --vocab "$V" --out /tmp/q --gpu --force --expert-input-scale 0.1667
for b in 1 4; do
  timeout 120 ./build-gpu/mtpq bench-decode --backend cuda --target $T/model --drafter /tmp/q \
    --prompts $T/traces.safetensors -n 96 -k 3 --batch $b --json > "$O/decode-b$b.json" 2> "$O/decode-b$b.err"
  echo "bench-decode batch $b rc $?"
  python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
for r in d['runs']:
    a = r.get('all', {})
    print(f\"  {r['drafter'][-24:]:24s} {r['tokens_per_s']:9.1f} tok/s  vs none {r['speedup_vs_none']:.3f}  MAL {a.get('mean_acceptance_length', 0):.3f}  lossless {r.get('output_equals_no_speculation')}\")
" "$O/decode-b$b.json"
done
echo "done at ${SECONDS}s"
