#!/usr/bin/env bash
# GPU machine, one call: where the CUDA prefill's time goes. Builds the
# working tree, then runs `mtpq bench-target --synthetic qwen3-next-80b
# --prefill 4096` under ncu twice: the first LAUNCHES (default 100, about
# five layers of the 80B shape) of the prefill's own kernels (k_p_*; not
# cuBLAS's GEMMs of the dense products) timed one by one, summed by kernel
# name with their launch counts and mean per launch into
# OUT/prefill-kernels.txt (a layer's share: the mean times the launches a
# layer makes); and the first gate/up and down launches of the grouped
# expert GEMM (k_p_egemm) with ncu's throughput, occupancy and warp-state
# sections into
# OUT/egemm.txt. With VARIANTS (source trees, carried) each is built too (in
# the background, beside the working tree) and its bench-target prefill line
# printed next to the working tree's (which runs once more after the last
# variant: the call's spread), before the profiles. With CHECK=1,
# check_gpu_target runs first (at most 150 s); with CHECKV=1 it runs on
# each variant too, after its build (but those whose numbers NOCHECK lists,
# e.g. NOCHECK="2 4").
# The profiles are skipped once the call has run STOP seconds (default 420).
#
#   [LAUNCHES=100] [CHECK=1] [CHECKV=1] [STOP=420] bash tests/bench/device_prefill_prof.sh OUT [VARIANT...]
#
# Carry .device-debs (and any VARIANT trees).
set -uo pipefail
O=$1
shift
mkdir -p "$O"
. tests/bench/device_lib.sh
export MTPQ_DEVICE_TARGETS="mtpq check_gpu_target"
dev_build_all "$O" "$@" || exit 1
echo "built at ${SECONDS}s"
args=(bench-target --synthetic qwen3-next-80b --context 4096 --verify 2 --prefill 4096 --iters 3)
if [ "${CHECK:-0}" = 1 ]; then
  dev_check_target ./build-gpu "$O" 150
  mv "$O/check_gpu_target.txt" "$O/check_gpu_target-new.txt"
fi
timeout 120 ./build-gpu/mtpq "${args[@]}" > "$O/bt-new.txt" 2>&1
echo "new: $(grep prefill "$O/bt-new.txt") at ${SECONDS}s"
n=0
for v in "$@"; do
  n=$((n + 1))
  [ "${DEV_OK[$n]}" = 1 ] || continue
  if [ "${CHECKV:-0}" = 1 ] && [[ " ${NOCHECK:-} " != *" $n "* ]]; then
    dev_check_target /tmp/var$n/build-gpu "$O" 150
    mv "$O/check_gpu_target.txt" "$O/check_gpu_target-var$n.txt"
  fi
  timeout 120 /tmp/var$n/build-gpu/mtpq "${args[@]}" > "$O/bt-var$n.txt" 2>&1
  echo "variant $n ($v): $(grep prefill "$O/bt-var$n.txt") at ${SECONDS}s"
done
timeout 120 ./build-gpu/mtpq "${args[@]}" > "$O/bt-new-again.txt" 2>&1
echo "new again: $(grep prefill "$O/bt-new-again.txt") at ${SECONDS}s"
[ $SECONDS -lt "${STOP:-420}" ] || { echo "no time left for the profiles"; exit 0; }
timeout 150 ncu --clock-control none --cache-control none -k 'regex:k_p_' --launch-count "${LAUNCHES:-100}" --csv \
  --page raw --metrics gpu__time_duration.sum --log-file "$O/ncu-prefill.csv" ./build-gpu/mtpq "${args[@]}" \
  > "$O/ncu-run.txt" 2>&1
echo "ncu (kernels one by one) rc $? at ${SECONDS}s"
python3 - "$O/ncu-prefill.csv" > "$O/prefill-kernels.txt" <<'EOF'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
ki, ti = rows[0].index("Kernel Name"), rows[0].index("gpu__time_duration.sum")
t = collections.defaultdict(list)
for r in rows[2:]:
    try:
        t[r[ki].split("(")[0]].append(float(r[ti].replace(",", "")) / 1e3)
    except ValueError:
        pass
print("%-40s %8s %10s %10s" % ("kernel", "launches", "ms", "us each"))
for k, v in sorted(t.items(), key=lambda kv: -sum(kv[1])):
    print("%-40s %8d %10.3f %10.1f" % (k[:40], len(v), sum(v) / 1e3, sum(v) / len(v)))
EOF
cat "$O/prefill-kernels.txt"
[ $SECONDS -lt "${STOP:-420}" ] || { echo "no time left for the egemm profile"; exit 0; }
timeout 150 ncu --clock-control none -k 'regex:k_p_egemm' --launch-count 2 --section SpeedOfLight \
  --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  ./build-gpu/mtpq "${args[@]}" > "$O/egemm.txt" 2>&1
echo "ncu (k_p_egemm) rc $? at ${SECONDS}s"
grep -E "k_p_egemm|Duration|Throughput|Achieved Occupancy|Registers|Stall|Pipe|Hit Rate" "$O/egemm.txt" | head -60
