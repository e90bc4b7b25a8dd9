#!/usr/bin/env bash
# Device runs copy the working tree (64 MiB cap). `on` drops the big files a
# run does not need from the index and ignores them locally; `off` restores
# both exactly. Never commit between on and off.
set -euo pipefail
cd "$(dirname "$0")/.."
PATHS="${MTPQ_SLIM_PATHS:-testdata/tiny-qwen3next/model/model-00001-of-00002.safetensors}"
case "${1:-}" in
  on)
    for p in $PATHS; do git rm -q --cached "$p"; echo "/$p" >> .git/info/exclude; done ;;
  off)
    for p in $PATHS; do grep -vxF "/$p" .git/info/exclude > .git/info/exclude.new || true; mv .git/info/exclude.new .git/info/exclude; done
    git reset -q HEAD -- $PATHS ;;
  *) echo "usage: device-slim.sh on|off"; exit 2 ;;
esac
git status --short | head
