#!/usr/bin/env python3
"""vLLM live (issue 53), on the GPU machine: one configuration a process.

  live.py none|stock|mtpq TARGET DRAFTER TRACES OUT.json [K] [N]

Greedy generation of N tokens (default 96) after each prompt of the traces
file (its first 192 tokens, as bench-acceptance and bench-decode take them)
with vLLM's offline LLM: no speculation, vLLM's stock MTP path (the target's
own mtp.*), or the mtpq -mtpfp8 repo DRAFTER as the MTP draft model through
the mtpq_vllm plugin; K draft tokens (default 3). Writes the token ids of
every output, vLLM's own spec-decode counters (drafts, draft tokens,
accepted tokens, accepted per position) and the wall time to OUT.json.

The engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0) so the
plugin's log line shows here; eager mode, Triton attention (the trimmed
vLLM tree carries no FlashAttention extension).
"""
import json
import logging
import os
import sys
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")

mode, target, drafter, traces, out = sys.argv[1:6]
K = int(sys.argv[6]) if len(sys.argv) > 6 else 3
N = int(sys.argv[7]) if len(sys.argv) > 7 else 96
PROMPT = 192

from safetensors import safe_open  # noqa: E402

with safe_open(traces, "pt") as f:
    names = sorted({k.rsplit(".", 1)[0] for k in f.keys() if k.endswith(".tokens")},
                   key=lambda s: (s.split(".")[0], int(s.split(".")[1])))
    prompts = [f.get_tensor(n + ".tokens")[:PROMPT].tolist() for n in names]
    shipped = [f.get_tensor(n + ".tokens")[PROMPT:PROMPT + N].tolist() for n in names]

from vllm import LLM, SamplingParams  # noqa: E402
from vllm.inputs import TokensPrompt  # noqa: E402

spec = None
if mode == "stock":
    spec = {"method": "mtp", "num_speculative_tokens": K}
elif mode == "mtpq":
    spec = {"method": "mtp", "num_speculative_tokens": K, "model": drafter}
t0 = time.time()
llm = LLM(model=target, speculative_config=spec, enforce_eager=True, attention_backend="TRITON_ATTN",
          max_model_len=PROMPT + N + 16, gpu_memory_utilization=float(os.environ.get("GPU_UTIL", "0.2")),
          disable_log_stats=False, seed=0)
t1 = time.time()
res = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                   SamplingParams(temperature=0.0, max_tokens=N, ignore_eos=True))
t2 = time.time()
toks = [list(r.outputs[0].token_ids) for r in res]
metrics = {}
for m in llm.get_metrics():
    if m.name.startswith("vllm:spec_decode"):
        metrics[m.name] = getattr(m, "values", None) or getattr(m, "value", None)
rep = {"mode": mode, "k": K, "new_tokens": N, "prompts": names, "tokens": toks, "spec_decode": metrics,
       "load_s": t1 - t0, "generate_s": t2 - t1,
       "equal_to_shipped_traces": sum(a == b for a, b in zip(toks, shipped))}
d = metrics.get("vllm:spec_decode_num_drafts")
if d:
    acc = metrics.get("vllm:spec_decode_num_accepted_tokens", 0)
    pos = metrics.get("vllm:spec_decode_num_accepted_tokens_per_pos") or []
    rep["mean_acceptance_length"] = 1 + acc / d
    rep["per_position"] = [p / d for p in pos]
json.dump(rep, open(out, "w"))
print(f"{mode}: load {t1 - t0:.1f} s, generate {t2 - t1:.2f} s, {len(toks)} prompts, "
      f"equal to the shipped traces {rep['equal_to_shipped_traces']}/{len(toks)}, spec_decode {metrics}", flush=True)
