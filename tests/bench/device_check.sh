#!/usr/bin/env bash
# GPU machine, one call: the gpu suite on the working tree, and bench-step at
# 4K, batch 1 and 8, of the working tree against another tree (the tree
# before a change), same card, rows alternating, compared by compare.py.
#
#   bash tests/bench/device_check.sh OUT WORK [BASE [VOCAB]]
#
# OUT: where the summary (check.txt) and the logs (check.tgz) go (the device
# tool's $OUT, which brings back few files); WORK: scratch (the fixture, the
# other tree's build, every log); BASE: a source tree to
# compare with (e.g. `git archive COMMIT | tar -x -C .device-base`, carried),
# built with its own .ci/device-build.sh; VOCAB: the draft vocabulary for
# the fixture's drafter (dev_fixture). Carry .device-debs (and BASE, VOCAB).
# MTPQ_CHECK_LIMIT: seconds the whole script may take (default 570); the
# gpu suite gets what is left after the timed rows.
set -uo pipefail
FIN=$1 W=$2 BASE=${3:-} VOCAB=${4:-}
O=$W/log
rm -rf "$O" && mkdir -p "$O" "$FIN"
{
MTPQ_DEVICE_ENV_ONLY=1 . .ci/device-build.sh # the packages unpacked once, before two builds use them
( OUT=$O; . .ci/device-build.sh ) > "$O/build.txt" 2>&1 &
tp=$!
if [ -n "$BASE" ]; then
  rm -rf "$W/base" && cp -r "$BASE" "$W/base"
  (cd "$W/base" && MTPQ_DEVICE_ENV_ONLY=1 . .ci/device-build.sh &&
    cmake -S . -B build-gpu -DMTPQ_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_BUILD_RPATH="$D/lib/x86_64-linux-gnu" > "$O/base-build.txt" 2>&1 &&
    cmake --build build-gpu -j8 --target mtpq >> "$O/base-build.txt" 2>&1) &
  bp=$!
fi
wait $tp || { echo "build failed"; tail -30 "$O/build.txt"; exit 1; }
. tests/bench/device_lib.sh
export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
dev_card "$O"
dev_fixture ./build-gpu "$W" "$VOCAB" || echo "fixture failed"
echo "fixture done at ${SECONDS}s"
if [ -n "$BASE" ]; then
  wait $bp || { echo "base build failed"; tail -30 "$O/base-build.txt"; }
  for r in 1 2; do # alternating, so that drift over the run falls on both
    dev_row "$W/base/build-gpu" "$W" "$O/base-$r.txt" --context 4096 --batch 1 --batch 8
    dev_row ./build-gpu "$W" "$O/tree-$r.json" --context 4096 --batch 1 --batch 8 --json
  done
  for r in 1 2; do
    echo "== compare (pair $r): base -> tree"
    python3 tests/bench/compare.py "$O/base-$r.txt" "$O/tree-$r.json" --max-pct 2
    echo "compare rc $?"
  done
else
  dev_row ./build-gpu "$W" "$O/tree-1.json" --context 4096 --batch 1 --batch 8 --json
fi
echo "rows done at ${SECONDS}s"
TM=testdata/tiny-qwen3next
./build-gpu/mtpq quantize -q $TM/model --vocab "$W/dv.safetensors" --out "$W/tq" --expert-input-scale 0.1667 --force
for be in cpu cuda; do
  ./build-gpu/mtpq bench-acceptance --backend $be --target $TM/model --traces $TM/traces.safetensors \
    --drafter "$W/tq" --json > "$O/accept-$be.json"
done
python3 - "$O/accept-cpu.json" "$O/accept-cuda.json" <<'PY'
import json, sys
c, g = (json.load(open(p)) for p in sys.argv[1:])
for a, b in zip(c["drafters"], g["drafters"]):
    x, y = a["all"], b["all"]
    same = x["per_position"] == y["per_position"] and x["drafts"] == y["drafts"]
    print(f"acceptance {a['kind']}: cpu MAL {x['mean_acceptance_length']:.4f} ({x['drafts']:.0f} drafts), "
          f"cuda MAL {y['mean_acceptance_length']:.4f} ({y['drafts']:.0f}): {'equal' if same else 'DIFFERENT'}")
PY
left=$((${MTPQ_CHECK_LIMIT:-570} - SECONDS))
echo "gpu suite: $left s left at ${SECONDS}s"
dev_gpu_suite ./build-gpu "$O" "$left"
} 2>&1 | tee "$FIN/check.txt"
cp "$O"/tree-*.json "$O"/base-*.txt "$FIN"/ 2>/dev/null
tar -C "$O" -czf "$FIN/check.tgz" .
