# Shared by tests/bench/device_step_variants.sh and device_alt.sh (sourced
# on the GPU machine, after .ci/device-build.sh, with OUT set): the card, the
# 80B-shaped fixture and its mtpq drafter, one timed bench-step row.
T=/tmp/t80 # the fixture; its mtpq drafter is /tmp/q80

dev_card() {
  { date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader; } |
    tee "$OUT/card.txt"
}

dev_fixture() { # BUILD: gen_fixture's 80B shape (--nvfp4-target) and its drafter, quantized on the GPU
  "$1"/tests/gen_fixture $T --nvfp4-target > /dev/null &&
    "$1"/mtpq quantize $T --vocab "${MTPQ_DEVICE_VOCAB:-dv.safetensors}" --out /tmp/q80 --gpu --force | tail -1
}

# BUILD LABEL [VAR=VALUE...]: bench-step of the stock and mtpq drafters at
# ${CTX:-4096}, batch 1, ${ITERS:-40} calls (--profile when ROW_PROFILE is
# set), log in $OUT/row-LABEL.txt; prints LABEL and each drafter's us/step
dev_row() {
  local b=$1 label=$2
  shift 2
  env "$@" timeout 90 "$b"/mtpq bench-step --backend cuda --target $T --drafter /tmp/q80 --context "${CTX:-4096}" \
    --iters "${ITERS:-40}" ${ROW_PROFILE:+--profile} > "$OUT/row-$label.txt" 2>&1
  printf '%-22s %s\n' "$label" "$(grep -E '^(stock|/tmp/q80)' "$OUT/row-$label.txt" | awk '{printf "%s=%s us  ", $1, $(NF-6)}')"
}

# BUILD LABEL: one draft call (3 steps) of the mtpq row at 4K, batch 1 (or
# NCU_BATCH), under ncu, kernel by kernel (serialised: each kernel's duration
# alone; call 50: the stock row makes 45 calls at --iters 40); the second
# step's kernels and their sum in $OUT/ncu-LABEL-summary.txt
dev_ncu() {
  local b=$1 label=$2
  timeout 120 ncu --clock-control none --cache-control none --profile-from-start off --csv --page raw \
    --metrics gpu__time_duration.sum --log-file "$OUT/ncu-$label.csv" env MTPQ_CUDA_PROFILE_CALL=50 "$b"/mtpq \
    bench-step --backend cuda --target $T --drafter /tmp/q80 --context 4096 --iters 40 ${NCU_BATCH:+--batch $NCU_BATCH} \
    > "$OUT/ncu-$label-run.txt" 2>&1
  python3 - "$OUT/ncu-$label.csv" <<'PY' | tee "$OUT/ncu-$label-summary.txt"
import csv, sys, re
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
hdr = next(i for i, r in enumerate(rows) if 'Kernel Name' in r)
h = rows[hdr]; ki = h.index('Kernel Name'); ti = h.index('gpu__time_duration.sum')
unit = rows[hdr + 1][ti]; scale = {'nsecond': 1, 'usecond': 1e3, 'msecond': 1e6}.get(unit, 1)
ks = [(re.sub(r'\(.*', '', r[ki])[:60], float(r[ti].replace(',', '')) * scale) for r in rows[hdr + 2:] if len(r) > ti]
n = len(ks) // 3 if len(ks) % 3 == 0 else len(ks)
tot = 0
for name, ns in ks[n:2 * n] if n != len(ks) else ks:  # the second step of the call
    print(f'{name:62s} {ns / 1e3:8.1f} us'); tot += ns
print(f'{"sum (one step, kernels alone)":62s} {tot / 1e3:8.1f} us; {len(ks)} kernels recorded')
PY
  tail -3 "$OUT/ncu-$label-run.txt"
}

# BUILD LABEL: one draft call (3 steps) of the mtpq row at 4K, batch 1 (or
# NCU_BATCH), traced by nsys with the graph's kernels as nodes (programmatic
# launch on, as in the timed rows; call 50 as in dev_ncu): per kernel of the
# second step, its end minus the previous kernel's end on the same stream
# (what it adds to the step) and its traced duration (which, launched early,
# includes its wait); $OUT/nsys-LABEL.txt
dev_nsys() {
  local b=$1 label=$2 nsys
  nsys=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys 2>/dev/null | head -1)
  [ -n "$nsys" ] || { echo "nsys: not found"; return; }
  timeout 150 "$nsys" profile --cuda-graph-trace=node --capture-range=cudaProfilerApi --capture-range-end=stop \
    -o "/tmp/nsys-$label" -f true env MTPQ_CUDA_PROFILE_CALL=50 "$b"/mtpq bench-step --backend cuda --target $T \
    --drafter /tmp/q80 --context 4096 --iters 40 ${NCU_BATCH:+--batch $NCU_BATCH} > "$OUT/nsys-$label-run.txt" 2>&1
  "$nsys" stats --report cuda_gpu_trace --format csv -o "/tmp/nsys-$label" "/tmp/nsys-$label.nsys-rep" > /dev/null 2>&1
  python3 - /tmp/nsys-"$label"_cuda_gpu_trace.csv <<'PY' | tee "$OUT/nsys-$label.txt"
import csv, sys, re
rows = list(csv.DictReader(open(sys.argv[1])))
if not rows or 'Start (ns)' not in rows[0]:
    sys.exit(f"unexpected trace columns: {list(rows[0]) if rows else 'none'}")
ks = [r for r in rows if r.get('Name') and not r['Name'].startswith('[CUDA')]
def f(r, k): return float(r[k].replace(',', ''))
n = len(ks) // 3 if len(ks) % 3 == 0 else len(ks)
step = ks[n:2 * n] if n != len(ks) else ks
t0 = f(step[0], 'Start (ns)'); last = {}
prev_end = max(f(r, 'Start (ns)') + f(r, 'Duration (ns)') for r in ks[:n]) if n != len(ks) else t0
print(f"{'kernel':40s} {'strm':>4s} {'start':>8s} {'dur':>7s} {'adds':>7s}  (us, from the step's first kernel start)")
end_all = prev_end
for r in step:
    s, d = f(r, 'Start (ns)'), f(r, 'Duration (ns)'); st = r.get('Strm', '?'); e = s + d
    adds = e - max(end_all, s - 0) if e > end_all else 0.0
    print(f"{re.sub(r'[(<].*', '', r['Name'])[:40]:40s} {st:>4s} {(s - t0) / 1e3:8.1f} {d / 1e3:7.1f} {adds / 1e3:7.1f}")
    end_all = max(end_all, e)
print(f"step: {(end_all - prev_end) / 1e3:.1f} us from the previous step's last end; {len(ks)} kernels traced")
PY
}
