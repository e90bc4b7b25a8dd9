#!/usr/bin/env bash
# GPU machine: vLLM live (issue 53). A call carries at most 64 MiB, so the
# pieces that tests/vllm_live/prepare.sh made come in consecutive calls, one
# carried folder each, while the machine stays warm (/tmp survives between
# calls then):
#   bash tests/vllm_live/device.sh unpack .vl/1      (then .vl/2, ...)
#   bash tests/vllm_live/device.sh run OUT K         (in the last call)
# run: the vLLM tree and the carried wheels into /tmp/vl/site (shadowing
# the machine's versions of those packages: what vLLM pins wins), the
# plugin from quant/vllm_plugin with its entry point, then live.py with no
# speculation, stock MTP and the mtpq drafter at once (a fifth of the GPU
# each), then the OpenAI server with the drafter answering one completion.
set -uo pipefail
V=/tmp/vl
case ${1:-} in
unpack)
  mkdir -p $V/in
  cp "$2"/* $V/in/
  ls -la $V/in | tail -n +2 | awk '{s += $5} END {print "unpack: " NR " files, " s / 1048576 " MiB in /tmp/vl/in"}' ;;
run)
  O=$2 K=${3:-3}
  mkdir -p $V/site "$O"
  cat $V/in/vllm.tar.xz.part-* | tar -C $V/site -xJf - || { echo "vllm tree: unpack failed"; exit 1; }
  for f in $V/in/site-*.tar.xz; do tar -C $V/site -xJf "$f"; done  # (FlashAttention 3: vLLM's loader imports it)
  for f in $V/in/model.tar.xz $V/in/drafter.tar.xz; do tar -C $V -xJf "$f"; done
  python3 tests/vllm_live/untie.py $V/model  # vLLM 0.26's Qwen3-Next leaves a tied lm_head unloaded
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $V/site $V/in/*.whl \
    > "$O/pip.txt" 2>&1 || { echo "pip failed"; tail -20 "$O/pip.txt"; exit 1; }
  cp -r quant/vllm_plugin/mtpq_vllm $V/site/
  mkdir -p $V/site/mtpq_vllm-0.1.0.dist-info
  printf 'Metadata-Version: 2.1\nName: mtpq-vllm\nVersion: 0.1.0\n' > $V/site/mtpq_vllm-0.1.0.dist-info/METADATA
  printf '[vllm.general_plugins]\nmtpq = mtpq_vllm:register\n' > $V/site/mtpq_vllm-0.1.0.dist-info/entry_points.txt
  # (no flashinfer here: vLLM's sampler imports it unless told not to)
  export PYTHONPATH=$V/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 VLLM_USE_FLASHINFER_SAMPLER=0
  T=$V/model D=$V/drafter TR=testdata/tiny-qwen3next/traces.safetensors
  python3 -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" 2>&1 | tail -3
  pids=()
  for m in none stock mtpq; do
    GPU_UTIL=0.2 timeout 420 python3 tests/vllm_live/live.py $m $T $D $TR "$O/live-$m.json" "$K" 96 \
      > "$O/live-$m.log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  for m in none stock mtpq; do echo "== $m"; grep -E "^(none|stock|mtpq):|mtpq_vllm|Error|error" "$O/live-$m.log" | head -8; done
  # the server after the live runs: started beside them, its memory profiling
  # saw their memory freed and refused to start (the first run that got here)
  python3 -m vllm.entrypoints.openai.api_server --model $T --port 8011 --enforce-eager \
    --attention-backend TRITON_ATTN --max-model-len 512 --gpu-memory-utilization 0.3 \
    --speculative-config "{\"method\": \"mtp\", \"num_speculative_tokens\": $K, \"model\": \"$D\"}" \
    > "$O/serve.log" 2>&1 &
  srv=$!
  python3 tests/vllm_live/serve_check.py 8011 300 $srv > "$O/serve-check.txt" 2>&1
  echo "serve check rc $?"; cat "$O/serve-check.txt"
  kill $srv 2>/dev/null
  grep -E "mtpq_vllm|Error" "$O/serve.log" | head -5
  python3 tests/vllm_live/compare.py "$O" ;;
*) echo "usage: device.sh unpack DIR | run OUT [K]"; exit 2 ;;
esac
