#!/usr/bin/env bash
# GPU machine, one call: the sampled live loop on the 80B shape. The tiny
# model's sampled run at k = 3 (temperature 0.8, top-p 0.95; its mtpq
# drafter quantized on the GPU with VOCAB) and its greedy run, each report
# kept as an acceptance pattern; then the synthetic Qwen3-Next-80B-A3B trunk
# with the 80B-shaped stock and mtpq drafters from position 4096, sampled
# and greedy, each round accepting what the same round of the tiny model's
# run of the same mode accepted (random weights never agree): tokens/s and
# where the time goes.
#
#   bash tests/bench/device_sample80.sh OUT VOCAB
#
# Carry .device-debs, .device-data/tiny.tar.xz (unpack it first) and VOCAB.
set -uo pipefail
O=$1 V=$2 T=testdata/tiny-qwen3next W=/tmp/mtpq-s80
S="--temperature 0.8 --top-p 0.95 --seed 1"
mkdir -p "$O" "$W"
. tests/bench/device_lib.sh
dev_build "$O" || exit 1
echo "built at ${SECONDS}s"
./build-gpu/mtpq quantize -q $T/model --vocab "$V" --out "$W/q" --gpu --force --expert-input-scale 0.1667
timeout 100 ./build-gpu/mtpq bench-decode --backend cuda --target $T/model --drafter "$W/q" \
  --prompts $T/traces.safetensors -n 96 -k 3 $S --json > "$W/tiny-s.json" 2> "$O/tiny-s.err"
echo "tiny sampled rc $?"
timeout 100 ./build-gpu/mtpq bench-decode --backend cuda --target $T/model --drafter "$W/q" \
  --prompts $T/traces.safetensors -n 96 -k 3 --json > "$W/tiny-g.json" 2> "$O/tiny-g.err"
echo "tiny greedy rc $?"
dev_fixture ./build-gpu "$W" "$V" > "$O/fixture.txt" 2>&1 || { echo "fixture failed"; tail "$O/fixture.txt"; exit 1; }
echo "fixture at ${SECONDS}s"
for m in s g; do
  x=""
  [ $m = s ] && x=$S
  timeout 200 ./build-gpu/mtpq bench-decode --backend cuda --target "$W/t80" --drafter "$W/q80" \
    --trunk synthetic:qwen3-next-80b --accept-pattern "$W/tiny-$m.json" --context 4096 \
    --prompts $T/traces.safetensors -n 96 -k 3 $x > "$O/d80-$m.txt" 2>&1
  echo "80B bench-decode ($m) rc $? at ${SECONDS}s"
  grep -vE "^  |^95%" "$O/d80-$m.txt"
done
