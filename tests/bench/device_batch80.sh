#!/usr/bin/env bash
# GPU machine, one call: the gpu suite (check_gpu, check_gpu_runtime; at
# most SUITE seconds, default 120), then the live loop on the synthetic
# Qwen3-Next-80B-A3B trunk with its stock and mtpq drafters from position
# 4096 at batch B and k K for each "B K" pair given (default "1 3" "4 1"
# "4 3" "8 1"), each round accepting what the tiny model's same round did
# at batch 1. Logs under /tmp; the tables on stdout and in OUT/d80.txt.
#
#   bash tests/bench/device_batch80.sh OUT VOCAB ["B K"...]
#
# Carry .device-debs, .device-data/tiny.tar.xz (unpack it first) and VOCAB.
set -uo pipefail
O=$1 V=$2 T=testdata/tiny-qwen3next W=/tmp/mtpq-b80
shift 2
[ $# -gt 0 ] || set -- "1 3" "4 1" "4 3" "8 1"
mkdir -p "$O" "$W" /tmp/suite
. tests/bench/device_lib.sh
dev_build "$O" || exit 1
echo "built at ${SECONDS}s"
dev_gpu_suite ./build-gpu /tmp/suite "${SUITE:-120}"
echo "suite done at ${SECONDS}s"
./build-gpu/mtpq quantize -q $T/model --vocab "$V" --out "$W/q" --gpu --force --expert-input-scale 0.1667
for k in $(for r in "$@"; do set -- $r; echo $2; done | sort -u); do
  timeout 100 ./build-gpu/mtpq bench-decode --backend cuda --target $T/model --drafter "$W/q" \
    --prompts $T/traces.safetensors -n 64 -k $k --json > "$W/tiny-k$k.json" 2> "$W/tiny-k$k.err"
  echo "tiny bench-decode k=$k rc $?"
done
dev_fixture ./build-gpu "$W" "$V" > "$W/fixture.txt" 2>&1 || { echo "fixture failed"; tail "$W/fixture.txt"; exit 1; }
echo "fixture at ${SECONDS}s"
for run in "$@"; do
  set -- $run
  timeout 150 ./build-gpu/mtpq bench-decode --backend cuda --target "$W/t80" --drafter "$W/q80" \
    --trunk synthetic:qwen3-next-80b --accept-pattern "$W/tiny-k$2.json" --context 4096 \
    --prompts $T/traces.safetensors -n 48 -k $2 -b $1 > "$W/d80.txt" 2>&1
  echo "80B batch $1 k=$2 rc $? at ${SECONDS}s" | tee -a "$O/d80.txt"
  grep -vE "^  |^95%|^tokens/s:" "$W/d80.txt" | tail -n +3 | tee -a "$O/d80.txt"
done
