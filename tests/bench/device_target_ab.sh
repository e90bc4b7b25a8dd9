#!/usr/bin/env bash
# GPU machine, one call: a change to the target's kernels against the tree
# before it. Builds the working tree and BASE (a source tree, e.g.
# `rm -rf .device-base && mkdir .device-base && git archive HEAD | tar -x -C .device-base`,
# carried), runs check_gpu_target on the working tree, then bench-target on
# the synthetic 80B shape (4K: decode, verify T = 2 and 4, prefill of 4K)
# alternating new / base twice; then, with REPLICA set, the same bench-target
# on a file-based target: tests/fakehub/make_replica.py's Qwen3-Next-80B-A3B
# NVFP4 layout (51 GB of sparse shards, read through the safetensors loader).
#
#   [REPLICA=1] [ARGS="..."] bash tests/bench/device_target_ab.sh OUT BASE
#
# Carry .device-debs, .device-data/tiny.tar.xz (unpack it first: the tests
# read the tiny model) and BASE. BASE may instead be a build directory that
# holds mtpq (a tree built earlier on the same machine): then it is not
# built again. ARGS: the bench-target options after --synthetic
# qwen3-next-80b (default: --context 4096 --prefill 4096 --iters 30).
set -uo pipefail
O=$1 B=$2
mkdir -p "$O"
. tests/bench/device_lib.sh
dev_build "$O" || exit 1
bb=$B
[ -x "$B/mtpq" ] || { dev_base_build "$B" "$O" && bb=/tmp/base/build-gpu; } || exit 1
echo "built both at ${SECONDS}s"
dev_check_target ./build-gpu "$O" 200
read -r -a extra <<< "${ARGS:---context 4096 --prefill 4096 --iters 30}"
args=(bench-target --synthetic qwen3-next-80b "${extra[@]}")
for r in 1 2; do
  for t in new base; do
    b=./build-gpu
    [ $t = base ] && b=$bb
    timeout 120 $b/mtpq "${args[@]}" > "$O/bt-$t-$r.txt" 2>&1
    echo "bench-target $t run $r rc $? at ${SECONDS}s"
    grep -E "decode|verify|prefill" "$O/bt-$t-$r.txt"
  done
done
if [ "${REPLICA:-0}" = 1 ]; then
  python3 tests/fakehub/make_replica.py qwen3-next-80b /tmp/rep -
  timeout 300 ./build-gpu/mtpq bench-target --target /tmp/rep --context 4096 --prefill 0 --iters 30 \
    > "$O/bt-replica.txt" 2>&1
  echo "bench-target file-based replica rc $? at ${SECONDS}s"
  cat "$O/bt-replica.txt"
  nvidia-smi --query-gpu=memory.total --format=csv,noheader
fi
