#!/usr/bin/env bash
# GPU machine, one call: the live loop with the hidden states kept on the
# device (mtpq_session_step_at / mtpq_session_draft_at) against the tree
# before it (BASE: every round's hidden states copied to the host and back,
# a wait per catch-up, head and draft call). Builds the working tree, and
# BASE (a source tree, carried; see device_target_ab.sh) beside the tests of
# the working tree (check_gpu_runtime's tiny case: the hand-over against
# the host-memory calls; check_gpu_sample; check_gpu_target), then, new
# then base, twice, while the call has time (each part starts only before
# STOP seconds, default 540): the tiny model's greedy loop at k = 3, batch 1 and 4
# (bench-decode exits 9 if an output differs from the one without
# speculation), its sampled loop at batch 1, and the synthetic
# Qwen3-Next-80B-A3B trunk with its stock and mtpq drafters from position
# 4096 at k = 3, batch 1 (each round accepting what the tiny model's same
# round accepted).
#
#   bash tests/bench/device_handover_ab.sh OUT BASE VOCAB
#
# Carry .device-debs, .device-data/tiny.tar.xz (unpack it first), BASE and VOCAB.
set -uo pipefail
O=$1 B=$2 V=$3 T=testdata/tiny-qwen3next W=/tmp/mtpq-hab STOP=${STOP:-540}
mkdir -p "$O" "$W"
. tests/bench/device_lib.sh
dev_build "$O" || exit 1
echo "built at ${SECONDS}s"
# (BASE built already on this machine, by an earlier call of the session: kept)
[ -x /tmp/base/build-gpu/mtpq ] || (dev_base_build "$B" "$O" > /dev/null; echo "base built rc $? at ${SECONDS}s") &
(cd build-gpu && CK_RUN_CASE=tiny timeout 240 ./tests/check_gpu_runtime > "$O/rt-tiny.txt" 2>&1
  echo "check_gpu_runtime tiny rc $? at ${SECONDS}s: $(grep -E '^[0-9]+%: Checks' "$O/rt-tiny.txt")") &
timeout 200 ./build-gpu/tests/check_gpu_sample > "$O/check_gpu_sample.txt" 2>&1
echo "check_gpu_sample rc $? at ${SECONDS}s: $(grep -E '^[0-9]+%: Checks' "$O/check_gpu_sample.txt")"
wait
grep -E "F:|E:" "$O/rt-tiny.txt" "$O/check_gpu_sample.txt" | head -12
dev_check_target ./build-gpu "$O" 240
[ -x /tmp/base/build-gpu/mtpq ] || { echo "no base build"; exit 1; }
./build-gpu/mtpq quantize -q $T/model --vocab "$V" --out "$W/q" --gpu --force --expert-input-scale 0.1667
summ() { # a bench-decode --json report, a line
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('  '+'; '.join('%s %.1f tok/s (target %.1f%%, draft %.1f%%, accept %.1f%%)%s' % (x['drafter'].split('/')[-1], x['tokens_per_s'], 100*x['target_s']/x['generate_s'], 100*x['draft_s']/x['generate_s'], 100*x['accept_s']/x['generate_s'], ', MAL %.3f' % x['all']['mean_acceptance_length'] if 'all' in x else '') for x in r['runs']))" "$1"
}
for rep in 1 2; do
  for t in new base; do
    x=./build-gpu
    [ $t = base ] && x=/tmp/base/build-gpu
    [ $SECONDS -lt $((STOP - 60)) ] || continue
    for b in 1 4; do
      f="$O/tiny-b$b-$t-$rep.json"
      timeout 100 $x/mtpq bench-decode --backend cuda --target $T/model --drafter "$W/q" \
        --prompts $T/traces.safetensors -n 96 -k 3 -b $b --json > "$f" 2> "$f.err"
      echo "tiny greedy k=3 batch $b $t (run $rep) rc $?"
      summ "$f"
    done
    f="$O/tiny-s-$t-$rep.json"
    timeout 100 $x/mtpq bench-decode --backend cuda --target $T/model --drafter "$W/q" \
      --prompts $T/traces.safetensors -n 32 -k 3 --temperature 0.8 --top-p 0.95 --seed 1 --json > "$f" 2> "$f.err"
    echo "tiny sampled k=3 batch 1 $t (run $rep) rc $?"
    summ "$f"
  done
done
cp "$O/tiny-b1-new-1.json" "$W/tiny-k3.json" || exit 1
[ $SECONDS -lt $((STOP - 120)) ] || { echo "no time left for the 80B shape"; exit 0; }
dev_fixture ./build-gpu "$W" "$V" > "$O/fixture.txt" 2>&1 || { echo "fixture failed"; tail "$O/fixture.txt"; exit 1; }
echo "fixture at ${SECONDS}s"
for rep in 1 2; do
  for t in new base; do
    x=./build-gpu
    [ $t = base ] && x=/tmp/base/build-gpu
    [ $SECONDS -lt $((STOP - 40)) ] || continue
    f="$O/d80-$t-$rep.json"
    timeout 150 $x/mtpq bench-decode --backend cuda --target "$W/t80" --drafter "$W/q80" \
      --trunk synthetic:qwen3-next-80b --accept-pattern "$W/tiny-k3.json" --context 4096 \
      --prompts $T/traces.safetensors -n 48 -k 3 --json > "$f" 2> "$f.err"
    echo "80B greedy k=3 batch 1 $t (run $rep) rc $? at ${SECONDS}s"
    summ "$f"
  done
done
rm -f "$O"/*.err
