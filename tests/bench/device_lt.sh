#!/usr/bin/env bash
# GPU machine: cuBLASLt against the runtime's own kernels on the 80B shape
# (issue 7: "cuBLASLt where it wins"). Builds the tree (build-gpu) and
# tests/bench/lt_bench.cu; then lt_bench's table (CUDA events: each product
# and a kernel streaming the same bytes, cold in L2); the 80B fixture and
# the runtime's kernels one by one under ncu at 4K (stock and mtpq, batch 1
# and 8: dev_ncu); last, lt_bench's best algorithms under ncu (LT_MARK=1),
# so that both sides are kernels' own durations. Writes $OUT/lt.txt,
# $OUT/lt-ncu.txt and $OUT/ncu-summaries.txt (the device transfer brings
# back a few files only: the logs go into $OUT/lt.tgz). Carry
# [".device-debs", "dv.safetensors"].
set -uo pipefail
FIN=${OUT:-/tmp/out}
OUT=/tmp/lt-out
rm -rf "$OUT" && mkdir -p "$OUT" "$FIN"
MTPQ_DEVICE_ENV_ONLY=1 . .ci/device-build.sh || exit 1
unset MTPQ_DEVICE_ENV_ONLY
set +e
(. .ci/device-build.sh) > "$OUT/tree-build.txt" 2>&1 &
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/lt_bench tests/bench/lt_bench.cu -lcublasLt ||
  echo "lt_bench: build failed"
wait
. tests/bench/device_lib.sh
dev_card
timeout 150 /tmp/lt_bench > "$OUT/lt.txt" 2>&1
echo "lt_bench: rc $?"
cat "$OUT/lt.txt"
[ -x build-gpu/mtpq ] || { echo "tree: build failed"; tail -30 "$OUT/tree-build.txt"; exit 1; }
dev_fixture ./build-gpu
for b in 1 8; do
  NCU_BATCH=$b NCU_CALL=10 dev_ncu ./build-gpu "stock-b$b"
  NCU_BATCH=$b dev_ncu ./build-gpu "mtpq-b$b"
done
# the cuBLASLt kernels' own durations: between marker kernels (grid 2 x row:
# the product's, twice; 2 x row + 1: the stream's, twice), all caches
# flushed before each kernel
LT_MARK=1 timeout 200 ncu --clock-control none --cache-control all --profile-from-start off --csv --page raw \
  --metrics gpu__time_duration.sum,launch__grid_size --log-file "$OUT/lt-ncu.csv" /tmp/lt_bench > "$OUT/lt-ncu-run.txt" 2>&1
echo "lt_bench under ncu: rc $?"
python3 - "$OUT/lt-ncu.csv" "$OUT/lt.txt" <<'PY' | tee "$OUT/lt-ncu.txt"
import csv, sys, re
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
hdr = next(i for i, r in enumerate(rows) if 'Kernel Name' in r)
h = rows[hdr]; ki = h.index('Kernel Name'); ti = h.index('gpu__time_duration.sum'); gi = h.index('launch__grid_size')
unit = rows[hdr + 1][ti]; scale = {'nsecond': 1e-3, 'usecond': 1, 'msecond': 1e3}.get(unit, 1e-3)
names = {}
for l in open(sys.argv[2]):
    f = l.split()
    if f and f[0].isdigit(): names[int(f[0])] = ' '.join(f[1:])
cur, acc = None, {}
for r in rows[hdr + 2:]:
    if len(r) <= max(ti, gi): continue
    name, us = r[ki], float(r[ti].replace(',', '')) * scale
    if name.startswith('k_mark'):
        cur = int(r[gi].replace(',', '')); acc.setdefault(cur, []); continue
    if cur is not None: acc[cur].append((re.sub(r'\(.*', '', name)[:40], us))
print(f'{"row":>4s} {"lt us":>7s} {"stream us":>9s} {"lt/str":>6s}  kernels; the row')
for row in sorted({k // 2 for k in acc}):
    lt, st = acc.get(2 * row, []), acc.get(2 * row + 1, [])
    if not lt or not st: continue
    lu, su = sum(u for _, u in lt) / 2, sum(u for _, u in st) / 2
    print(f'{row:4d} {lu:7.1f} {su:9.1f} {lu / su:6.2f}  {"+".join(sorted({n for n, _ in lt}))}; {names.get(row, "")[:70]}')
PY
for f in "$OUT"/ncu-*-summary.txt; do echo "== $(basename "$f")"; cat "$f"; done > "$OUT/ncu-summaries.txt"
cp "$OUT/lt.txt" "$OUT/lt-ncu.txt" "$OUT/ncu-summaries.txt" "$FIN"/ 2>/dev/null
tar -C "$OUT" -czf "$FIN/lt.tgz" .
