#!/usr/bin/env bash
# GPU-machine run for `mtpq quantize` at full size: generate the synthetic
# Qwen3-Next-80B-A3B-shaped target (gen_fixture defaults, NVFP4-style with
# expert input_scale), build a draft vocabulary from the example counts,
# quantize on the CPU (all cores) and on the GPU, time both next to a plain
# read of the input, prove the two repos identical and every tensor
# bit-exact, and torch.load the .pt files. Logs in $OUT.
# Usage: bash tests/bench/device_quantize.sh OUT WORK (OUT: logs; WORK: scratch for the inputs and
# outputs); carry .device-debs.
set -uo pipefail
OUT=$1 WK=$2
export WK
mkdir -p "$OUT" "$WK"
. .ci/device-build.sh || exit 1
M=./build-gpu/mtpq G=./build-gpu/tests/gen_fixture T=$WK/t80
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; } | tee "$OUT/card.txt"
/usr/bin/time -f "gen_fixture: %e s" $G $T --nvfp4-target
$M inspect -s $T | head -4
$M build-vocab -t testdata/tiny-qwen3next/model/tokenizer.json -c testdata/tiny-qwen3next/counts/code_train.tsv \
  -c testdata/tiny-qwen3next/counts/prose_train.tsv:10 -n 98304 --out $WK/dv
/usr/bin/time -f "read input (cat, page cache warm): %e s" cat $T/model.safetensors > /dev/null
/usr/bin/time -f "quantize cpu (-j $(nproc)): %e s, peak RSS %M KB" $M quantize $T --vocab $WK/dv.safetensors --out $WK/q-cpu
/usr/bin/time -f "quantize gpu: %e s, peak RSS %M KB" $M quantize $T --vocab $WK/dv.safetensors --out $WK/q-gpu --gpu
/usr/bin/time -f "quantize cpu -j 1: %e s" $M quantize $T --vocab $WK/dv.safetensors --out $WK/q-cpu1 -j 1
echo "== cpu vs gpu repo"; $M verify-bitexact $WK/q-cpu $WK/q-gpu | tail -1
for f in $(ls $WK/q-cpu); do cmp -s $WK/q-cpu/$f $WK/q-gpu/$f && echo "same $f" || echo "DIFFERENT $f"; done
echo "== requantize check"; /usr/bin/time -f "verify: %e s" $M verify-bitexact --requantize $T $WK/q-gpu | tail -1
ls -la $WK/q-gpu
python3 - <<'PY'
import torch, struct, json, os
def st_ids(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8+n])["ids"]
    s, e = h["data_offsets"]; return list(struct.unpack(f"<{(e-s)//8}q", b[8+n+s:8+n+e]))
wk = os.environ["WK"]
for pt, st in ((wk + "/dv.pt", wk + "/dv.safetensors"), (wk + "/q-gpu/mtp_draft_vocab_ids.pt", wk + "/q-gpu/mtp_draft_vocab_ids.safetensors")):
    t = torch.load(pt)  # weights_only=True (the default)
    print(pt, "torch.load ->", type(t).__name__, t.dtype, tuple(t.shape), "equal to safetensors ids:", t.tolist() == st_ids(st))
PY
