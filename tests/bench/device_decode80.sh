#!/usr/bin/env bash
# GPU machine, one call: issue 49's throughput run. The tiny model's greedy
# live loop at k = 1..4 (its mtpq drafter quantized on the GPU with the draft
# vocabulary VOCAB; bench-decode exits 9 if an output differs from the one
# without speculation), each report kept as JSON: the acceptance patterns.
# Then the synthetic Qwen3-Next-80B-A3B trunk (NVIDIA's NVFP4 layout, made in
# device memory) with the 80B-shaped stock MTP drafter and its mtpq drafter
# (gen_fixture --nvfp4-target, quantized on the GPU), from position 4096,
# each round accepting what the same round of the tiny model's run accepted
# (random weights never agree): tokens/s of no speculation, stock and mtpq.
#
#   bash tests/bench/device_decode80.sh OUT VOCAB [K...]
set -uo pipefail
O=$1 V=$2 T=testdata/tiny-qwen3next W=/tmp/mtpq-d80
shift 2
KS=${*:-1 2 3 4}
mkdir -p "$O" "$W"
. tests/bench/device_lib.sh
dev_build "$O" || exit 1
echo "built at ${SECONDS}s"
./build-gpu/mtpq quantize -q $T/model --vocab "$V" --out "$W/q" --gpu --force --expert-input-scale 0.1667
for k in $KS; do
  timeout 100 ./build-gpu/mtpq bench-decode --backend cuda --target $T/model --drafter "$W/q" \
    --prompts $T/traces.safetensors -n 96 -k $k --json > "$W/tiny-k$k.json" 2> "$O/tiny-k$k.err"
  echo "tiny bench-decode k=$k rc $?"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('  '+'; '.join('%s %.1f tok/s%s' % (x['drafter'].split('/')[-1], x['tokens_per_s'], ', MAL %.3f' % x['all']['mean_acceptance_length'] if 'all' in x else '') for x in r['runs']))" "$W/tiny-k$k.json"
done
dev_fixture ./build-gpu "$W" "$V" > "$O/fixture.txt" 2>&1 || { echo "fixture failed"; tail "$O/fixture.txt"; exit 1; }
echo "fixture at ${SECONDS}s"
for k in $KS; do
  timeout 200 ./build-gpu/mtpq bench-decode --backend cuda --target "$W/t80" --drafter "$W/q80" \
    --trunk synthetic:qwen3-next-80b --accept-pattern "$W/tiny-k$k.json" --context 4096 \
    --prompts $T/traces.safetensors -n 96 -k $k > "$O/d80-k$k.txt" 2>&1
  echo "80B bench-decode k=$k rc $? at ${SECONDS}s"
  cat "$O/d80-k$k.txt"
done
tar -C "$W" -cJf "$O/tiny-patterns.tar.xz" $(cd "$W" && ls tiny-k*.json)
