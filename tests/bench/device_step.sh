#!/usr/bin/env bash
# GPU-machine run for issue 7, everything: build, gpu runtime tests, the 4K
# batch-1 switches, one step's kernels under ncu, bench-acceptance on the
# tiny model and the full bench-step table (batch 1/2/4/8 at 4K, 1/8 at 32K).
# It is device_step_variants.sh with MTPQ_FULL=1; its knobs apply. (Runs in
# RESULTS.md before 2026-11-29's third round used this file's earlier
# version: see git history.)
MTPQ_FULL=${MTPQ_FULL:-1} exec bash "$(dirname "$0")/device_step_variants.sh" "$@"
