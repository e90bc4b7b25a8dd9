#!/usr/bin/env bash
# GPU machine: a per-block timeline (kernels/rt_tl.cuh) of the 80B-shaped
# drafters' last draft call at 4K, batch 1 (3 steps), with the shared expert
# on its own stream (the default: k_final waits for it, a plain kernel
# boundary before the head) and with MTPQ_CUDA_SIDE=0 (on the step's
# stream: programmatic dependence all the way to the head; the fifteenth
# round found the step ~36 us slower for stock, ~12 for mtpq, with k_final
# under PDL, cause not known: tests/bench/RESULTS.md). Builds build-gpu
# (the fixture's tools) and build-tl (-DMTPQ_CUDA_TIMELINE=ON). Carry
# [".device-debs", "dv.safetensors"]. Output: $OUT/tl-*.csv and their
# summaries (tests/bench/timeline.py). The launch names are one step's
# enqueue order; with the shared expert on its own stream its three
# launches may start in another order beside the router's.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
. .ci/device-build.sh || exit 1
. tests/bench/device_lib.sh
set +e
cmake -S . -B build-tl -DMTPQ_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DMTPQ_CUDA_TIMELINE=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_BUILD_RPATH="$D/lib/x86_64-linux-gnu" > "$OUT/tl-configure.log" 2>&1 &&
  cmake --build build-tl -j"$(nproc)" --target mtpq > "$OUT/tl-build.log" 2>&1 || { tail -30 "$OUT/tl-build.log"; exit 1; }
dev_card
dev_fixture ./build-gpu
NAMES=prep,fc,norm,qkv,attn,combine,o,add_norm,gus,swiglu,downs,rs,route,gu,down,final,head,next
for side in 1 0; do
  for who in stock mtpq; do
    f=$OUT/tl-$who-side$side.csv
    MTPQ_CUDA_SIDE=$side MTPQ_CUDA_TL_FILE=$f ./build-tl/mtpq bench-step --backend cuda --target $T \
      $([ $who = mtpq ] && echo --drafter /tmp/q80) --context 4096 --iters 5 > "$OUT/tl-$who-side$side-run.txt" 2>&1
    echo "== $who, MTPQ_CUDA_SIDE=$side"
    grep -E '^(stock|/tmp/q80)' "$OUT/tl-$who-side$side-run.txt" | tail -1
    python3 tests/bench/timeline.py "$f" $NAMES | tee "$OUT/tl-$who-side$side.txt"
  done
done
