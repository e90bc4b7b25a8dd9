#!/usr/bin/env bash
# Device runs copy the working tree (64 MiB cap). `on` drops the big files a
# run does not need from the index and ignores them locally, noting them in
# .git/mtpq-slim; `off` restores exactly those (whatever MTPQ_SLIM_PATHS is
# then). Never commit between on and off.
set -euo pipefail
cd "$(dirname "$0")/.."
NOTE=.git/mtpq-slim
# (default: what the gpu tests and benchmarks do without; the tiny model's
# shards stay, the gpu tests read them)
PATHS="${MTPQ_SLIM_PATHS:-testdata/golden/nvfp4_fp8_golden_torchcpu.safetensors testdata/golden/nvfp4_fp8_golden_torchcuda.safetensors testdata/tiny-qwen3next/model/tokenizer.json}"
case "${1:-}" in
  on)
    [ ! -s "$NOTE" ] || { echo "device-slim.sh: already on ($(tr '\n' ' ' < "$NOTE")); run off first" >&2; exit 1; }
    for p in $PATHS; do git rm -q --cached "$p"; echo "/$p" >> .git/info/exclude; echo "$p" >> "$NOTE"; done ;;
  off)
    [ -s "$NOTE" ] && PATHS=$(cat "$NOTE")
    for p in $PATHS; do grep -vxF "/$p" .git/info/exclude > .git/info/exclude.new || true; mv .git/info/exclude.new .git/info/exclude; done
    git reset -q HEAD -- $PATHS
    rm -f "$NOTE" ;;
  *) echo "usage: device-slim.sh on|off"; exit 2 ;;
esac
git status --short | head
