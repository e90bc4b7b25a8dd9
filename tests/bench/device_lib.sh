# Functions for the GPU-machine scripts (source it first; dev_build builds).
# Every path is an argument: nothing here writes a fixed /tmp name.

# OUTDIR: build with .ci/device-build.sh (its log in OUTDIR/build.txt and
# build.log; their tails and status 1 when it fails), put the unpacked
# packages' libraries on LD_LIBRARY_PATH, and write the card (dev_card)
dev_build() {
  ( OUT=$1; . .ci/device-build.sh ) > "$1/build.txt" 2>&1 ||
    { echo "build failed"; tail -n 40 "$1/build.txt" "$1"/build.log; return 1; }
  export LD_LIBRARY_PATH=/tmp/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  dev_card "$1"
}

# BASE OUTDIR: the source tree BASE (the tree before a change, carried)
# built in /tmp/base (its log in OUTDIR/base-build.txt; its tail and status 1 when it fails)
dev_base_build() {
  rm -rf /tmp/base && cp -r "$1" /tmp/base && cp -r .device-debs /tmp/base/
  (cd /tmp/base && OUT=/tmp/base-out && mkdir -p $OUT && . .ci/device-build.sh) > "$2/base-build.txt" 2>&1 ||
    { echo "base build failed"; tail -n 20 "$2/base-build.txt"; return 1; }
}

# BUILD OUTDIR SECONDS: check_gpu_target of BUILD (at most SECONDS; its log
# in OUTDIR/check_gpu_target.txt), its summary and any failure on stdout
dev_check_target() {
  timeout "$3" "$1"/tests/check_gpu_target > "$2/check_gpu_target.txt" 2>&1
  echo "check_gpu_target rc $? at ${SECONDS}s: $(grep -E '^[0-9]+%: Checks' "$2/check_gpu_target.txt")"
  grep -E "F:|E:|together|prefill" "$2/check_gpu_target.txt" | head -24
}

# OUTDIR: the card, driver, clocks and CUDA into OUTDIR/card.txt (and stdout)
dev_card() {
  { date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader;
    nvcc --version | tail -1; } | tee "$1/card.txt"
}

# BUILD WORK [VOCAB]: the synthetic 80B-shaped target (gen_fixture
# --nvfp4-target: the MTP layer and head at full size) in WORK/t80, and its
# mtpq drafter quantized on the GPU in WORK/q80 with the draft vocabulary
# VOCAB (default: 98,304 ids built from the example's counts into WORK/dv,
# which needs the example's tokenizer.json)
dev_fixture() {
  local b=$1 w=$2 v=${3:-} T=testdata/tiny-qwen3next
  mkdir -p "$w"
  if [ -z "$v" ]; then
    "$b"/mtpq build-vocab -q --tokenizer $T/model/tokenizer.json --counts $T/counts/code_train.tsv \
      --counts $T/counts/prose_train.tsv:10 --size 98304 --out "$w/dv" > /dev/null || return 1
    v=$w/dv.safetensors
  fi
  cp "$v" "$w/dv.safetensors" 2>/dev/null
  "$b"/tests/gen_fixture "$w/t80" --nvfp4-target > /dev/null &&
    "$b"/mtpq quantize -q "$w/t80" --vocab "$w/dv.safetensors" --out "$w/q80" --gpu --force
}

# BUILD WORK FILE [bench-step options...]: the stock and mtpq drafters of
# WORK's fixture, bench-step into FILE (default 4K, batch 1, 40 calls; add
# --json where the build has it: compare.py reads either)
dev_row() {
  local b=$1 w=$2 j=$3
  shift 3
  timeout 240 "$b"/mtpq bench-step --backend cuda --target "$w/t80" --drafter "$w/q80" --iters 40 "$@" > "$j"
}

# BUILD WORK OUTDIR: one draft call's kernels of the mtpq row at 4K batch 1
# under ncu (each kernel's duration alone, serialised), OUTDIR/ncu.csv;
# SKIP launches are passed over first (the warm-up calls)
dev_ncu() {
  timeout 200 ncu --clock-control none --cache-control none --launch-skip "${SKIP:-2000}" --launch-count 60 --csv \
    --page raw --metrics gpu__time_duration.sum --log-file "$3/ncu.csv" "$1"/mtpq bench-step --backend cuda \
    --target "$2/t80" --drafter "$2/q80" --context 4096 --iters 40 > "$3/ncu-run.txt" 2>&1
}

# BUILD OUTDIR NAME KERNEL [bench-target options...]: ncu (clocks as they
# run) on two launches of the kernels whose names match the regex KERNEL,
# after SKIP of them (default 96: two forwards of one launch a layer), in
# bench-target on the synthetic 80B shape (default options: 4K, verify T =
# 4 only, no prefill, 3 steps); the log in OUTDIR/ncu-NAME.csv, its
# figures (tests/bench/ncu_pick.py) on stdout
dev_ncu_kernel() {
  local b=$1 o=$2 n=$3 k=$4
  shift 4
  [ $# -gt 0 ] || set -- --context 4096 --verify 4 --prefill 0 --iters 3
  timeout 150 ncu --clock-control none --kernel-name "regex:$k" --launch-skip "${SKIP:-96}" --launch-count 2 \
    --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy \
    --metrics smsp__inst_executed.sum,dram__bytes_read.sum --csv --page details "$b"/mtpq bench-target \
    --synthetic qwen3-next-80b "$@" > "$o/ncu-$n.csv" 2> "$o/ncu-$n.err" || { tail -3 "$o/ncu-$n.err"; return 1; }
  python3 tests/bench/ncu_pick.py "$o/ncu-$n.csv"
}

# BUILD OUTDIR SECONDS: the gpu suite (check_gpu, and check_gpu_runtime's
# cases split over processes run at once: the tiny model's, then a random
# shape each), at most SECONDS; a summary line each, logs in OUTDIR/t-*.txt
dev_gpu_suite() {
  local b=$1 o=$2 left=$3 pids=() s f
  (cd "$b" && timeout "$left" ./tests/check_gpu > "$o/t-quant.txt" 2>&1) & pids+=($!)
  (cd "$b" && CK_RUN_CASE=tiny timeout "$left" ./tests/check_gpu_runtime > "$o/t-tiny.txt" 2>&1) & pids+=($!)
  for s in 0 1 2 3 4 5 6 7 8 9 10 long; do
    (cd "$b" && CK_RUN_CASE=random MTPQ_GPU_SHAPES=$s timeout "$left" ./tests/check_gpu_runtime > "$o/t-$s.txt" 2>&1) &
    pids+=($!)
  done
  wait "${pids[@]}"
  dev_summary "$o"/t-*.txt
}

# FILE...: each Check log's name and summary line, and its first failing or
# erring tests (Check's FILE:LINE:F: and :E: lines)
dev_summary() {
  local f
  for f in "$@"; do
    echo "$(basename "$f" .txt): $(grep -E '^[0-9]+%: Checks' "$f" | tail -1)"
    grep -E ':[FE]:' "$f" | head -4
  done
}

# OUTDIR VARIANT...: the working tree (dev_build) and every VARIANT (a
# source tree, e.g. `git archive BRANCH | tar -x -C DIR`) built at once, all
# before anything is timed: variant N in /tmp/varN (its log in
# OUTDIR/varN-build.txt), with this tree's .ci/device-build.sh and reading
# this tree's testdata (the gpu tests'); the packages unpacked once first.
# DEV_OK[N] = 1 for each variant that built; status 1 when the working tree
# did not
dev_build_all() {
  local o=$1 w=$PWD n=0 p pids=()
  shift
  (MTPQ_DEVICE_ENV_ONLY=1 . .ci/device-build.sh) || return 1
  for p in "$@"; do
    n=$((n + 1))
    rm -rf /tmp/var$n && cp -r "$p" /tmp/var$n && cp -r .device-debs /tmp/var$n/
    rm -rf /tmp/var$n/testdata && ln -sfn "$w/testdata" /tmp/var$n/testdata
    (cd /tmp/var$n && OUT=/tmp/var$n-out && mkdir -p $OUT && . "$w/.ci/device-build.sh") > "$o/var$n-build.txt" 2>&1 &
    pids+=($!)
  done
  dev_build "$o" || return 1
  n=0 DEV_OK=()
  for p in "${pids[@]}"; do
    n=$((n + 1))
    if wait "$p"; then DEV_OK[$n]=1; else DEV_OK[$n]=0; echo "variant $n build failed"; tail -n 20 "$o/var$n-build.txt"; fi
  done
}
