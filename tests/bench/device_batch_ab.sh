#!/usr/bin/env bash
# GPU machine, one call: the target verifying several sequences in one
# forward (mtpq_target_verify_many) against the tree before it. Builds the
# working tree and BASE (a source tree, carried; see device_target_ab.sh),
# runs check_gpu_target on the working tree, the tiny model's live loop at
# batch 4 (bench-decode exits 9 if an output differs from the one without
# speculation) and at batch 1 for the acceptance patterns, then the
# synthetic Qwen3-Next-80B-A3B trunk with its stock and mtpq drafters from
# position 4096 (each round accepting what the tiny model's same round did)
# at batch 1 and 4, new then base.
#
#   bash tests/bench/device_batch_ab.sh OUT BASE VOCAB
#
# Carry .device-debs, .device-data/tiny.tar.xz (unpack it first), BASE and VOCAB.
set -uo pipefail
O=$1 B=$2 V=$3 T=testdata/tiny-qwen3next W=/tmp/mtpq-bab
mkdir -p "$O" "$W"
. tests/bench/device_lib.sh
dev_build "$O" || exit 1
dev_base_build "$B" "$O" || exit 1
echo "built both at ${SECONDS}s"
dev_check_target ./build-gpu "$O" 240
./build-gpu/mtpq quantize -q $T/model --vocab "$V" --out "$W/q" --gpu --force --expert-input-scale 0.1667
for k in 1 3; do
  timeout 100 ./build-gpu/mtpq bench-decode --backend cuda --target $T/model --drafter "$W/q" \
    --prompts $T/traces.safetensors -n 64 -k $k --json > "$W/tiny-k$k.json" 2> "$O/tiny-k$k.err"
  echo "tiny bench-decode k=$k batch 1 rc $?"
  timeout 100 ./build-gpu/mtpq bench-decode --backend cuda --target $T/model --drafter "$W/q" \
    --prompts $T/traces.safetensors -n 64 -k $k -b 4 > "$O/tiny-k$k-b4.txt" 2>&1
  echo "tiny bench-decode k=$k batch 4 rc $? (9: an output differs)"
  grep -E "tok/s|none|stock|mtpq" "$O/tiny-k$k-b4.txt" | head -6
done
dev_fixture ./build-gpu "$W" "$V" > "$O/fixture.txt" 2>&1 || { echo "fixture failed"; tail "$O/fixture.txt"; exit 1; }
echo "fixture at ${SECONDS}s"
for run in "1 3" "4 1" "4 3"; do
  set -- $run
  for t in new base; do
    b=./build-gpu
    [ $t = base ] && b=/tmp/base/build-gpu
    f="$O/d80-b$1-k$2-$t.txt"
    timeout 150 $b/mtpq bench-decode --backend cuda --target "$W/t80" --drafter "$W/q80" \
      --trunk synthetic:qwen3-next-80b --accept-pattern "$W/tiny-k$2.json" --context 4096 \
      --prompts $T/traces.safetensors -n 64 -k $2 -b $1 > "$f" 2>&1
    echo "80B batch $1 k=$2 $t rc $? at ${SECONDS}s"
    head -5 "$f"
  done
done
