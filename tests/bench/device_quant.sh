#!/usr/bin/env bash
# GPU-machine run for quantization: build with CUDA, run the gpu-labelled
# tests (kernels vs C reference, byte for byte), the quant unit tests, the
# mtpq and PyTorch benchmarks on the same machine, and cross-check mtpq's
# bytes against torch's on fresh random data. Logs go to $OUT.
# Usage: bash tests/bench/device_quant.sh OUT WORK (OUT: logs; WORK: scratch for the inputs and
# outputs); carry .device-debs.
set -uo pipefail
OUT=$1 WK=$2
mkdir -p "$OUT" "$WK"
. .ci/device-build.sh || exit 1
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -1; } > "$OUT/card.txt"
cat "$OUT/card.txt"
(cd build-gpu && ctest --output-on-failure -R 'check_gpu|check_quant') 2>&1 | tee "$OUT/gpu-tests.log"
R=${ROWS:-8192} C=${COLS:-8192}
./build-gpu/mtpq bench-quant --rows "$R" --cols "$C" --iters 5 2>&1 | tee "$OUT/bench-mtpq.txt"
python3 tests/bench/torch_quant.py --rows "$R" --cols "$C" --iters 4 --out $WK/tq 2>&1 | tee "$OUT/bench-torch.txt"
for a in cuda cpu; do
  for g in "" --gpu; do
    echo "== verify torch reference_$a with mtpq --arith $a $g"
    ./build-gpu/mtpq verify-bitexact --requantize --arith "$a" $g $WK/tq/source.safetensors "$WK/tq/reference_$a.safetensors"
    echo "exit $?"
  done
done 2>&1 | tee "$OUT/verify-torch.txt"
