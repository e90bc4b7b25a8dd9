#!/usr/bin/env bash
# GPU machine, one call: where the target's forward spends its time inside
# its CUDA graph. Builds mtpq with the per-block timeline
# (-DMTPQ_CUDA_TIMELINE=ON, kernels/cuda/timeline.cuh) into build-tl/, runs
# bench-target on the synthetic Qwen3-Next-80B-A3B shape with
# MTPQ_CUDA_TL_FILE set (each forward of N sequences of T tokens leaves
# OUT/tl-NxT and its marks), and summarises the last decode and verify
# forwards with `tests/bench/timeline.py --target`: per launch family the
# kernel boundaries ("dep": the first wait's return after the launch
# before's last end) and the bodies, against the forward's span.
#
#   [TL_BUILD_ONLY=1] bash tests/bench/device_target_tl.sh OUT [bench-target options]
#
# TL_BUILD_ONLY=1: build and stop (run it again later to time: the build is
# then a no-op), so the build can run beside another job's GPU work.
# OUT: where the logs go (the device tool's $OUT). Carry .device-debs.
# Default options: --context 4096 --verify 2 --verify 4 --prefill 0 --iters 3.
set -uo pipefail
O=$1
shift
mkdir -p "$O"
MTPQ_DEVICE_ENV_ONLY=1 . .ci/device-build.sh
set +e
cmake -S . -B build-tl -DMTPQ_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DMTPQ_CUDA_TIMELINE=ON \
  -DMTPQ_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_BUILD_RPATH="$D/lib/x86_64-linux-gnu" \
  > "$O/tl-configure.log" 2>&1 || { tail -40 "$O/tl-configure.log"; exit 1; }
cmake --build build-tl -j"$(nproc)" --target mtpq > "$O/tl-build.log" 2>&1 || { tail -60 "$O/tl-build.log"; exit 1; }
echo "timeline build at ${SECONDS}s"
[ "${TL_BUILD_ONLY:-0}" = 1 ] && exit 0
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--context 4096 --verify 2 --verify 4 --prefill 0 --iters 3)
MTPQ_CUDA_TL_FILE="$O/tl" timeout 240 ./build-tl/mtpq bench-target --synthetic qwen3-next-80b "${args[@]}" \
  > "$O/tl-bench.txt" 2>&1
echo "bench-target rc $? at ${SECONDS}s"
cat "$O/tl-bench.txt"
for f in "$O"/tl-*x*; do
  case $f in *.names | *.txt | *.gz) continue ;; esac
  python3 tests/bench/timeline.py --target "$f" > "$f.txt" 2>&1
  echo "== $(basename "$f") (N sequences x T tokens)"
  cat "$f.txt"
  gzip -f "$f"
done
