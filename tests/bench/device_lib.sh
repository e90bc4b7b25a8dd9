# Shared by tests/bench/device_step_variants.sh and device_alt.sh (sourced
# on the GPU machine, after .ci/device-build.sh, with OUT set): the card, the
# 80B-shaped fixture and its mtpq drafter, one timed bench-step row.
T=/tmp/t80 # the fixture; its mtpq drafter is /tmp/q80
# the carried libraries' own dependencies (libcurl's) are found through
# LD_LIBRARY_PATH only, not the binaries' run path: set here too, so that
# sourcing this file alone is enough after a build (rows timed after
# device_alt.sh in the same call printed nothing without it)
case ":${LD_LIBRARY_PATH:-}:" in
  *:/tmp/deps/usr/lib/x86_64-linux-gnu:*) ;;
  *) export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} ;;
esac

dev_card() {
  { date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader; } |
    tee "$OUT/card.txt"
}

dev_fixture() { # BUILD: gen_fixture's 80B shape (--nvfp4-target) and its drafter, quantized on the GPU
  "$1"/tests/gen_fixture $T --nvfp4-target > /dev/null &&
    "$1"/mtpq quantize $T --vocab "${MTPQ_DEVICE_VOCAB:-dv.safetensors}" --out /tmp/q80 --gpu --force | tail -1
}

# Start a build of each alt/NAME tree (tests/bench/alt_trees.sh) in the
# background: /tmp/alt-NAME, a copy of this tree (without its builds and
# alt/) with alt/NAME's files laid over, built by .ci/device-build.sh (log in
# $OUT/alt-NAME-build.txt); appends NAME to the array names. The caller waits.
dev_alt_builds() {
  local a name dir root=$PWD
  for a in alt/*/; do
    [ -d "$a" ] || continue # no alt/ trees
    name=$(basename "$a") dir=/tmp/alt-$name
    rm -rf "$dir" && mkdir -p "$dir" &&
      tar -C "$root" --exclude=./build-gpu --exclude=./build-tl --exclude=./alt -cf - . | tar -C "$dir" -xf -
    cp -r "$a". "$dir"/
    names+=("$name")
    (cd "$dir" && OUT=$OUT/$name && mkdir -p "$OUT" && . .ci/device-build.sh) > "$OUT/alt-$name-build.txt" 2>&1 &
  done
}

# BUILD LABEL [VAR=VALUE...]: bench-step of the stock and mtpq drafters at
# ${CTX:-4096}, batch ${BATCH:-1}, ${ITERS:-40} calls of ${K:-3} steps (--profile when
# ROW_PROFILE is set), log in $OUT/row-LABEL.txt; prints LABEL and each
# drafter's us/step (a call / k) and dev us (its steps' device time / k)
dev_row() {
  local b=$1 label=$2
  shift 2
  env "$@" timeout 90 "$b"/mtpq bench-step --backend cuda --target $T --drafter /tmp/q80 --context "${CTX:-4096}" \
    --iters "${ITERS:-40}" ${BATCH:+--batch $BATCH} ${K:+-k $K} ${WARM:+--warm-l2} ${ROW_PROFILE:+--profile} > "$OUT/row-$label.txt" 2>&1
  printf '%-22s %s\n' "$label" "$(grep -E '^(stock|/tmp/q80)' "$OUT/row-$label.txt" | awk '{printf "%s=%s us (dev %s)  ", $1, $(NF-9), $(NF-1)}')"
}

# A row variant's VAR=VALUE[,VAR=VALUE...] (device_round.sh's and
# device_final.sh's MTPQ_ROW_VARIANTS entries): its CTX=N (the context;
# empty: 4K) in vctx, its BATCH=N (tokens a step; empty: 1) in vbatch, WARM=1
# (bench-step --warm-l2) in vwarm, the
# variables in venv (space-separated)
variant_env() {
  local l
  l=$(echo "$1" | tr ',' '\n')
  vctx=$(echo "$l" | sed -n 's/^CTX=//p')
  vbatch=$(echo "$l" | sed -n 's/^BATCH=//p')
  vwarm=$(echo "$l" | sed -n 's/^WARM=//p')
  venv=$(echo "$l" | grep -v -e '^CTX=' -e '^BATCH=' -e '^WARM=' | tr '\n' ' ')
}

# BUILD LABEL: one draft call (3 steps) of the mtpq row at 4K, batch 1 (or
# NCU_BATCH), under ncu, kernel by kernel (serialised: each kernel's duration
# alone; call 50: the stock row makes 45 calls at --iters 40, so NCU_CALL=10
# records the stock drafter's instead); the second
# step's kernels and their sum in $OUT/ncu-LABEL-summary.txt
dev_ncu() {
  local b=$1 label=$2
  timeout 120 ncu --clock-control none --cache-control none --profile-from-start off --csv --page raw \
    --metrics gpu__time_duration.sum --log-file "$OUT/ncu-$label.csv" env MTPQ_CUDA_PROFILE_CALL=${NCU_CALL:-50} "$b"/mtpq \
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

# The stall reasons, DRAM throughput, occupancy, registers and
# instructions of one draft call's kernels matching ${NCU_KERNELS} (default
# k_attn|k_mv|k_route|k_head|k_dmma), mtpq row at 4K, batch ${NCU_BATCH:-1},
# under ncu (serialised); one line a kernel of the call's second step in
# $OUT/ncu-detail-short.txt. Arg: the mtpq binary
dev_ncu_detail() {
  timeout 200 ncu --clock-control none --cache-control none --profile-from-start off -k "regex:${NCU_KERNELS:-k_attn|k_mv|k_route|k_head|k_dmma}" \
    --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy \
    --section LaunchStats --csv --page raw --log-file "$OUT/ncu-detail.csv" env MTPQ_CUDA_PROFILE_CALL=50 "$1" bench-step \
    --backend cuda --target $T --drafter /tmp/q80 --context 4096 --iters 40 ${NCU_BATCH:+--batch $NCU_BATCH} > /dev/null 2>&1
  # one line per kernel of the call's second step: duration, DRAM %, occupancy, registers, grid, top stall reasons
  python3 - "$OUT/ncu-detail.csv" <<'PY' | tee "$OUT/ncu-detail-short.txt"
import csv, sys, re
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
hdr = next(i for i, r in enumerate(rows) if 'Kernel Name' in r)
h = rows[hdr]; data = [r for r in rows[hdr + 2:] if len(r) == len(h)]
def col(r, name):
    try: return r[h.index(name)]
    except ValueError: return '?'
stalls = [i for i, n in enumerate(h) if re.match(r'smsp__average_warps?_issue_stalled_.*_per_issue_active\.ratio$', n)]
n = len(data) // 3 if len(data) % 3 == 0 else len(data)
for r in data[n:2 * n] if n != len(data) else data:
    name = re.sub(r'\(.*', '', r[h.index('Kernel Name')])[:48]
    st = sorted(((float(r[i].replace(',', '') or 0), re.sub(r'smsp__average_warps?_issue_stalled_|_per_issue_active\.ratio', '', h[i])) for i in stalls), reverse=True)[:4]
    print(f"{name:48s} {col(r, 'gpu__time_duration.sum'):>8s} dram% {col(r, 'gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed'):>6s} "
          f"occ {col(r, 'sm__warps_active.avg.pct_of_peak_sustained_active'):>6s} reg {col(r, 'launch__registers_per_thread'):>4s} "
          f"grid {col(r, 'launch__grid_size'):>6s} inst {col(r, 'sass__inst_executed_per_opcode'):>10s} "
          f"issue/cyc {col(r, 'smsp__issue_active.avg.per_cycle_active'):>5s} "
          + ' '.join(f'{k}={v:.1f}' for v, k in st))
print('units:', col(rows[hdr + 1], 'gpu__time_duration.sum'), '; stall columns:', len(stalls))
PY
}
