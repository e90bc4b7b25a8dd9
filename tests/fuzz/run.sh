#!/usr/bin/env bash
# Run every libFuzzer harness of a fuzz build over a copy of its corpus for
# SECONDS each; print executions, coverage and new corpus entries a harness;
# a crash leaves its input under tests/fuzz/crashes/NAME/ (copy it into
# tests/fuzz/regress/NAME/ once fixed: the default suite replays those) and
# makes the exit status 1. --grow: merge what each run found into the
# repository's corpus and add a row to HOURS.md, the running total of
# fuzzing time a harness has had (development machine; CI never writes
# either). NAME...: only those harnesses (default: all).
#   CC=clang cmake -S . -B build-fuzz -DMTPQ_FUZZ=ON -DMTPQ_CUDA=OFF && cmake --build build-fuzz
#   bash tests/fuzz/run.sh build-fuzz 30 [--grow] [NAME...]
set -uo pipefail
B=$1 S=$2
shift 2
GROW=
if [ "${1:-}" = --grow ]; then GROW=--grow; shift; fi
H=$(cd "$(dirname "$0")" && pwd)
fail=0
shopt -s nullglob
harnesses=()
if [ $# -gt 0 ]; then
  for n in "$@"; do harnesses+=("$B/fuzz/fuzz_$n"); done
else
  harnesses=("$B"/fuzz/fuzz_*)
fi
[ ${#harnesses[@]} -gt 0 ] || { echo "fuzz: no harnesses in $B/fuzz"; exit 1; }
for f in "${harnesses[@]}"; do
  n=$(basename "$f"); n=${n#fuzz_}
  work=$(mktemp -d) art=$(mktemp -d)
  [ -x "$f" ] || { echo "fuzz: no harness $f"; fail=1; continue; }
  cp "$H/corpus/$n"/* "$work"/ 2>/dev/null
  before=$(ls "$work" | wc -l)
  t0=$SECONDS
  TMPDIR=$art "$f" -max_total_time="$S" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -artifact_prefix="$art/" -print_final_stats=1 "$work" > "$art/log" 2>&1
  rc=$?
  ran=$((SECONDS - t0)) # (a run stopped by a crash or timeout is shorter than S)
  execs=$(grep -o 'number_of_executed_units: *[0-9]*' "$art/log" | grep -o '[0-9]*$' | tail -1)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$art/log" | tail -1)
  printf 'fuzz %-12s %3ss: %s executions, %s, corpus %d -> %d' "$n" "$S" "${execs:-?}" "${cov:-cov ?}" \
    "$before" "$(ls "$work" | wc -l)"
  crashes=("$art"/crash-* "$art"/leak-* "$art"/timeout-* "$art"/oom-*)
  if [ "$rc" -ne 0 ] || [ ${#crashes[@]} -gt 0 ]; then
    echo ": FAILED (exit $rc)"
    mkdir -p "$H/crashes/$n" && cp "${crashes[@]}" "$H/crashes/$n/" 2>/dev/null
    grep -E 'ERROR|SUMMARY|#[0-9]+ 0x' "$art/log" | head -12
    fail=1
  else
    echo
  fi
  if [ "$GROW" = --grow ]; then
    mkdir -p "$H/corpus/$n"
    "$f" -merge=1 "$H/corpus/$n" "$work" > /dev/null 2>&1
    printf '| %s | %s | %s | %s | %s | %s |\n' "$(date -u +%F)" "$n" "$ran" "${execs:-?}" \
      "${cov:-?}" "$([ "$rc" -eq 0 ] && [ ${#crashes[@]} -eq 0 ] && echo none || echo CRASH)" >> "$H/HOURS.md"
  fi
  rm -rf "$work" "$art"
done
exit $fail
