#!/usr/bin/env bash
# GPU machine, one call: the sampled live loop with its distributions on
# the device (kernels/sampler.h) against the tree before it (BASE: the
# host's sampling). Builds the working tree and BASE (a source tree,
# carried; see device_target_ab.sh), runs check_gpu_sample and
# check_gpu_target on the working tree, then the tiny model's sampled loop
# (the real Qwen3 vocabulary of 151,936 tokens: a distribution costs what
# it costs on the 80B) at batch 1 and 4, k = 3, new then base, twice.
#
#   bash tests/bench/device_sample_ab.sh OUT BASE VOCAB [BASE2]
#
# Carry .device-debs, .device-data/tiny.tar.xz (unpack it first), BASE and
# VOCAB (and BASE2: a third tree, built in /tmp/base2, run as "base2").
set -uo pipefail
O=$1 B=$2 V=$3 B2=${4:-} T=testdata/tiny-qwen3next W=/tmp/mtpq-sab
mkdir -p "$O" "$W"
. tests/bench/device_lib.sh
dev_build "$O" || exit 1
dev_base_build "$B" "$O" || exit 1
trees="new base"
if [ -n "$B2" ]; then
  rm -rf /tmp/base2 && cp -r "$B2" /tmp/base2 && cp -r .device-debs /tmp/base2/
  (cd /tmp/base2 && OUT=/tmp/base2-out && mkdir -p $OUT && . .ci/device-build.sh) > "$O/base2-build.txt" 2>&1 ||
    { echo "base2 build failed"; tail -n 20 "$O/base2-build.txt"; exit 1; }
  trees="new base base2"
fi
echo "built both at ${SECONDS}s"
timeout 200 ./build-gpu/tests/check_gpu_sample > "$O/check_gpu_sample.txt" 2>&1
echo "check_gpu_sample rc $? at ${SECONDS}s: $(grep -E '^[0-9]+%: Checks' "$O/check_gpu_sample.txt")"
grep -E "F:|E:|CUDA" "$O/check_gpu_sample.txt" | head -12
dev_check_target ./build-gpu "$O" 200
./build-gpu/mtpq quantize -q $T/model --vocab "$V" --out "$W/q" --gpu --force --expert-input-scale 0.1667
for rep in 1 2; do
  for b in 1 4; do
    for t in $trees; do
      x=./build-gpu
      [ $t = base ] && x=/tmp/base/build-gpu
      [ $t = base2 ] && x=/tmp/base2/build-gpu
      f="$O/tiny-b$b-$t-$rep.json"
      timeout 150 $x/mtpq bench-decode --backend cuda --target $T/model --drafter "$W/q" \
        --prompts $T/traces.safetensors -n 32 -k 3 -b $b --temperature 0.8 --top-p 0.95 --seed 1 --json > "$f" 2> "$f.err"
      echo "tiny sampled batch $b $t (run $rep) rc $? at ${SECONDS}s"
      python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('  '+'; '.join('%s %.1f tok/s, accept %.1f%%, target %.1f%%, draft %.1f%%%s' % (x['drafter'].split('/')[-1], x['tokens_per_s'], 100*x['accept_s']/x['generate_s'], 100*x['target_s']/x['generate_s'], 100*x['draft_s']/x['generate_s'], ', MAL %.3f' % x['all']['mean_acceptance_length'] if 'all' in x else '') for x in r['runs']))" "$f"
    done
  done
done
