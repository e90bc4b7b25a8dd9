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
