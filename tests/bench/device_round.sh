#!/usr/bin/env bash
# GPU machine: one call of a tuning round for issue 7. Builds the working
# tree (build-gpu), each alt/NAME tree (tests/bench/alt_trees.sh) and, with
# MTPQ_ROUND_TL=1 (the default), the working tree with -DMTPQ_CUDA_TIMELINE=ON
# (build-tl), all at once. Then: 4K batch-1 rows (dev_row: the tree, each alt
# tree (and at each context of MTPQ_ROUND_ALT_CTX), each MTPQ_ROW_VARIANTS
# entry LABEL:VAR=VALUE[,VAR=VALUE...] on the tree (CTX=N: at context N;
# BATCH=N: N tokens a step; WARM=1: bench-step --warm-l2), the tree again);
# the per-block timeline of each
# drafter's last call (tests/bench/timeline.py, the middle of its 3 steps),
# by default and with each MTPQ_ROUND_TL_VARIANTS entry (as the rows', where
# CTX=N sets the context, default 4096, and BATCH=N the tokens); with
# MTPQ_ROUND_TABLE=1 the table at batch 1, 2, 4 and 8 and contexts
# MTPQ_ROUND_CONTEXTS (default "4096 32768"); last the gpu runtime tests
# (MTPQ_ROUND_TESTS: random, the default: the random shapes
# MTPQ_ROUND_SHAPES, default 0,4,7; all: the whole check_gpu_runtime; 0:
# none). MTPQ_ROUND_SASS=REGEX: the disassembly of the matching kernels.
# MTPQ_ROUND_BG=COMMAND: run meanwhile (during the builds and the fixture),
# waited for before the first row.
# Everything it writes is packed into $OUT/round.tgz but its summary,
# $OUT/round.txt (the device transfer brings back a few files only). Carry
# [".device-debs", "dv.safetensors"] (+ "alt").
set -uo pipefail
OUT=${OUT:-/tmp/out}
FIN=$OUT
OUT=/tmp/round-out
rm -rf "$OUT" && mkdir -p "$OUT"
{
MTPQ_DEVICE_ENV_ONLY=1 . .ci/device-build.sh || exit 1 # the packages, and D, for the builds below
unset MTPQ_DEVICE_ENV_ONLY
set +e
# MTPQ_ROUND_BG: a command run meanwhile (the builds and the fixture: no
# timing; give it its own timeout), waited for before the first row (disowned,
# so that the builds' wait does not wait for it: its exit status in bg.rc)
if [ -n "${MTPQ_ROUND_BG:-}" ]; then
  (bash -c "$MTPQ_ROUND_BG" > "$OUT/bg.txt" 2>&1; echo $? > "$OUT/bg.rc") &
  disown
fi
(. .ci/device-build.sh) > "$OUT/tree-build.txt" 2>&1 &
. tests/bench/device_lib.sh
names=()
dev_alt_builds # (no alt/ trees: the working tree's rows only)
if [ "${MTPQ_ROUND_TL:-1}" = 1 ]; then
  (cmake -S . -B build-tl -DMTPQ_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DMTPQ_CUDA_TIMELINE=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_BUILD_RPATH="$D/lib/x86_64-linux-gnu" &&
    cmake --build build-tl -j"$(nproc)" --target mtpq) > "$OUT/tl-build.txt" 2>&1 &
fi
wait
[ -x build-gpu/mtpq ] || { echo "tree: build failed"; tail -30 "$OUT/tree-build.txt" "$OUT/build.log" 2>/dev/null; }
dev_card
dev_fixture ./build-gpu
# MTPQ_ROUND_SASS=REGEX: the disassembly of the working tree's kernels whose mangled names match
if [ -n "${MTPQ_ROUND_SASS:-}" ]; then
  cuobjdump -sass build-gpu/mtpq 2>/dev/null | awk -v re="$MTPQ_ROUND_SASS" \
    '/Function : /{on = ($0 ~ re)} on' > "$OUT/sass.txt"
  echo "sass: $(grep -c 'Function : ' "$OUT/sass.txt") kernels, $(wc -l < "$OUT/sass.txt") lines"
  python3 tests/bench/ldchain.py "$OUT/sass.txt" # their loads after the wait, in batches
fi
if [ -n "${MTPQ_ROUND_BG:-}" ]; then
  until [ -s "$OUT/bg.rc" ]; do sleep 1; done
  echo "MTPQ_ROUND_BG: rc $(cat "$OUT/bg.rc") at $(date -u +%T)"; tail -5 "$OUT/bg.txt"
fi
dev_row ./build-gpu tree
for name in "${names[@]}"; do
  if [ -x "/tmp/alt-$name/build-gpu/mtpq" ]; then
    dev_row "/tmp/alt-$name/build-gpu" "$name"
    for c in ${MTPQ_ROUND_ALT_CTX:-}; do CTX=$c dev_row "/tmp/alt-$name/build-gpu" "$name-$c"; done
  else echo "$name: build failed"; tail -20 "$OUT/alt-$name-build.txt"; fi
done
for v in ${MTPQ_ROW_VARIANTS:-}; do
  variant_env "${v#*:}"
  CTX=$vctx BATCH=$vbatch WARM=$vwarm dev_row ./build-gpu "${v%%:*}" $venv
done
dev_row ./build-gpu tree-again
if [ -x build-tl/mtpq ]; then
  for tv in default ${MTPQ_ROUND_TL_VARIANTS:-}; do # LABEL:VAR=VALUE[,VAR=VALUE...] as MTPQ_ROW_VARIANTS
    vctx= vbatch= venv=
    [ "$tv" = default ] || variant_env "${tv#*:}"
    tl=$([ "$tv" = default ] || echo "-${tv%%:*}")
    for who in stock mtpq; do
      f=$OUT/tl-$who$tl.csv
      env $venv MTPQ_CUDA_TL_FILE=$f ./build-tl/mtpq bench-step --backend cuda --target $T \
        $([ $who = mtpq ] && echo --drafter /tmp/q80) --context ${vctx:-4096} ${vbatch:+--batch $vbatch} --iters 5 > "$OUT/tl-$who$tl-run.txt" 2>&1
      echo "== timeline$tl, $who: $(grep -E '^(stock|/tmp/q80)' "$OUT/tl-$who$tl-run.txt" | tail -1)"
      python3 tests/bench/timeline.py "$f" - 3 1
    done
  done
elif [ "${MTPQ_ROUND_TL:-1}" = 1 ]; then
  echo "timeline build failed"; tail -20 "$OUT/tl-build.txt"
fi
if [ "${MTPQ_ROUND_TABLE:-0}" = 1 ]; then # the table, batch 1 to 8, at MTPQ_ROUND_CONTEXTS (default 4K and 32K)
  timeout 400 ./build-gpu/mtpq bench-step --backend cuda --target $T --drafter /tmp/q80 \
    $(for c in ${MTPQ_ROUND_CONTEXTS:-4096 32768}; do echo --context $c; done) --batch 1 \
    --batch 2 --batch 4 --batch 8 --iters ${ITERS:-20} > "$OUT/table.txt" 2>&1
  cat "$OUT/table.txt"
fi
# the tests last: nothing is timed after them
case "${MTPQ_ROUND_TESTS:-random}" in
  random) (cd build-gpu && CK_RUN_CASE=random MTPQ_GPU_SHAPES=${MTPQ_ROUND_SHAPES:-0,4,7} timeout 300 \
            ./tests/check_gpu_runtime) > "$OUT/gpu-tests.txt" 2>&1
          echo "gpu tests (random ${MTPQ_ROUND_SHAPES:-0,4,7}): $(tail -1 "$OUT/gpu-tests.txt")" ;;
  all) (cd build-gpu && timeout 500 ctest -R check_gpu_runtime --output-on-failure) > "$OUT/gpu-tests.txt" 2>&1
       grep -E 'relative error' "$OUT/gpu-tests.txt" | cut -c1-200
       echo "gpu tests (all): $(grep -E 'tests passed|tests failed' "$OUT/gpu-tests.txt")" ;;
esac
} 2>&1 | tee "$FIN/round.txt"
tar -C "$OUT" -czf "$FIN/round.tgz" .
