#!/usr/bin/env bash
# Development machine (network to PyPI; no GPU): the pieces of the vLLM live
# run (issue 53) for a GPU machine that has no network and takes at most
# 64 MiB a call, in folders of at most 48 MiB: OUT/1, OUT/2, ... (each
# carried by one call of tests/vllm_live/device.sh unpack).
#   bash tests/vllm_live/prepare.sh MTPQ VOCAB OUT
# MTPQ: the mtpq binary (it quantizes the tiny model's drafter with the draft
# vocabulary VOCAB); OUT: a folder git ignores (e.g. .vl).
#
# What goes: vLLM 0.26.0 (the newest release pinning torch 2.11.0, the GPU
# machine's) without what an sm_90 run in eager mode with Triton attention
# does not load (the FlashAttention 2 extension, the Rust frontend, FlashMLA,
# QuTLASS, the sm_100 FMHA and DeepGEMM trees), xz'd and split, with the
# FlashAttention 3 extension in a piece of its own (site-fa3.tar.xz); the
# wheels of its light dependencies (requirements-live.txt resolved by pip for
# Python 3.12, manylinux x86_64; the heavy or lazily imported ones, torch,
# flashinfer, cutlass-dsl, tilelang, humming-kernels, video and OpenCV
# packages, are not carried); the tiny model; its mtpq drafter.
set -euo pipefail
MTPQ=$1 VOCAB=$2 OUT=$3 HERE=$(cd "$(dirname "$0")" && pwd) T=$(cd "$HERE/../../testdata/tiny-qwen3next" && pwd)
W=${MTPQ_VLLM_WORK:-$HOME/.cache/mtpq-vllm-live}
mkdir -p "$W/wheels" "$OUT"
PLAT=(--python-version 3.12 --implementation cp --only-binary :all: --platform manylinux_2_28_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform linux_x86_64 --platform manylinux_2_27_x86_64
  --platform manylinux_2_24_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64
  --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64)
# 1. the vLLM tree
if [ ! -s "$W/vllm.tar.xz" ]; then
  python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$W" vllm==0.26.0
  rm -rf "$W/tree" && mkdir "$W/tree" && (cd "$W/tree" && unzip -q "$W"/vllm-0.26.0-*.whl)
  tar -C "$W/tree" -cf - --exclude='vllm/vllm_flash_attn/_vllm_fa*_C.abi3.so' --exclude=vllm/vllm-rs \
    --exclude=vllm/third_party/fmha_sm100 --exclude=vllm/third_party/deep_gemm --exclude='vllm/_flashmla*' \
    --exclude=vllm/_qutlass_C.abi3.so --exclude='__pycache__' vllm vllm-0.26.0.dist-info | xz -9 -T0 > "$W/vllm.tar.xz.tmp"
  # FlashAttention 3 apart (vLLM's model loader imports vllm_flash_attn, which needs one of its extensions)
  tar -C "$W/tree" -cf - vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so | xz -6 -T0 > "$W/site-fa3.tar.xz"
  mv "$W/vllm.tar.xz.tmp" "$W/vllm.tar.xz" && rm -rf "$W/tree"
fi
rm -f "$W"/vllm.tar.xz.part-* && split -b 40M -d "$W/vllm.tar.xz" "$W/vllm.tar.xz.part-"
# 2. the light dependencies: resolved (closure) where they need nothing heavy, the rest named with --no-deps
if [ ! -s "$W/wheels/.done" ]; then
  python3 -m pip install -q --dry-run --ignore-installed --report "$W/report.json" "${PLAT[@]}" --target "$W/x" \
    -r "$HERE/requirements-live.txt"
  python3 -c "import json,sys; [print(i['download_info']['url']) for i in json.load(open(sys.argv[1]))['install']]" \
    "$W/report.json" | grep -vE "$(paste -sd'|' "$HERE/skip-live.txt")" | (cd "$W/wheels" && xargs -n 8 -P 4 wget -q)
  python3 -m pip download -q --no-deps "${PLAT[@]}" -d "$W/wheels" -r "$HERE/nodeps-live.txt"
  touch "$W/wheels/.done"
fi
# 3. the tiny model, and its mtpq drafter
tar -C "$T" -cJf "$W/model.tar.xz" model
rm -rf "$W/drafter" && "$MTPQ" quantize -q "$T/model" --vocab "$VOCAB" --out "$W/drafter" --expert-input-scale 0.1667
tar -C "$W" -cJf "$W/drafter.tar.xz" drafter
# 4. into folders of at most 48 MiB, first fit, biggest first
rm -rf "$OUT" && mkdir -p "$OUT"
ls -S "$W"/vllm.tar.xz.part-* "$W"/site-fa3.tar.xz "$W"/model.tar.xz "$W"/drafter.tar.xz "$W"/wheels/*.whl | python3 -c "
import os, shutil, sys
out, cap, bins = sys.argv[1], 48 << 20, []
for f in sys.stdin.read().split():
    n = os.path.getsize(f)
    b = next((b for b in bins if b[0] + n <= cap), None)
    if b is None:
        b = [0, []]; bins.append(b)
    b[0] += n; b[1].append(f)
for i, (n, fs) in enumerate(bins, 1):
    d = os.path.join(out, str(i)); os.makedirs(d)
    for f in fs: shutil.copy(f, d)
    print(f'{d}: {len(fs)} files, {n / 2**20:.1f} MiB')
" "$OUT"
