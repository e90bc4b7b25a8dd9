#!/usr/bin/env python3
"""Independent PyTorch reference for mtpq's drafter runtime (run on the GPU
machine, which has torch and transformers; the outputs are stored in
testdata/runtime/ and checked in CI against the CPU backend).

The MTP drafter of the tiny Qwen3-Next model, float32, built around
transformers' own Qwen3NextDecoderLayer (gated attention with q/k norm and
partial NeoX RoPE via Qwen3NextRotaryEmbedding, the sparse MoE block with
its router and shared expert) and Qwen3NextRMSNorm for the pre-fc and final
norms; embedding, concat, fc and the tied head are written out here.

Outputs (OUT_DIR):
  forward_ref.safetensors  first drafter pass of trace code_heldout.0 over its
                           prompt slots t = 0..P-1 (tokens x[t+1], hidden h[t],
                           position t): out_hidden [P, H], argmax [P], logits of
                           the last 2 slots [2, V]; then one chained step
                           (token = argmax of slot P-1, hidden = out_hidden[P-1],
                           position P): step_hidden [1, H], step_argmax [1],
                           step_logits [1, V]
  replay_ref.json          the greedy draft/verify replay (k from the traces,
                           prompt 192) of every trace with the stock drafter:
                           per domain drafts, accepted[i], reached[i]
Attention is recomputed over the whole prefix at every call instead of
using a KV cache: the MTP layer's keys and values at a position depend only
on that position's input, so this equals a cache. Keys (after their norm
and RoPE) and values are rounded to bfloat16 before the attention, as
vLLM's cache of a BF16 model holds them and mtpq's runtime caches them
(the rounding is the one thing added to transformers' eager attention).
Usage: torch_mtp_reference.py MODEL_DIR TRACES OUT_DIR
"""
import json
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import Qwen3NextConfig
from transformers.models.qwen3_next import modeling_qwen3_next
from transformers.models.qwen3_next.modeling_qwen3_next import (
    Qwen3NextDecoderLayer,
    Qwen3NextRMSNorm,
    Qwen3NextRotaryEmbedding,
)

model_dir, traces_path, out_dir = sys.argv[1:4]
os.makedirs(out_dir, exist_ok=True)
dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

W = {}
for f in sorted(os.listdir(model_dir)):
    if f.endswith(".safetensors"):
        with safe_open(os.path.join(model_dir, f), framework="pt") as g:
            for k in g.keys():
                W[k] = g.get_tensor(k).float()

eager = modeling_qwen3_next.eager_attention_forward
kv_rounded = [0]


def eager_bf16_kv(module, query, key, value, *a, **kw):
    """transformers' eager attention over bfloat16-rounded keys and values (the cache's precision)."""
    kv_rounded[0] += 1
    return eager(module, query, key.to(torch.bfloat16).float(), value.to(torch.bfloat16).float(), *a, **kw)


modeling_qwen3_next.eager_attention_forward = eager_bf16_kv
cfg = Qwen3NextConfig.from_pretrained(model_dir)
cfg._attn_implementation = "eager"
cfg.layer_types = ["full_attention"] * max(1, cfg.num_hidden_layers)
H, E = cfg.hidden_size, cfg.num_experts

layer = Qwen3NextDecoderLayer(cfg, 0)
sd = {}
P0 = "mtp.layers.0."
for k, v in W.items():
    if k.startswith(P0) and ".mlp.experts." not in k:
        sd[k[len(P0):]] = v
sd["mlp.experts.gate_up_proj"] = torch.stack(
    [torch.cat([W[f"{P0}mlp.experts.{e}.gate_proj.weight"], W[f"{P0}mlp.experts.{e}.up_proj.weight"]]) for e in range(E)])
sd["mlp.experts.down_proj"] = torch.stack([W[f"{P0}mlp.experts.{e}.down_proj.weight"] for e in range(E)])
missing, unexpected = layer.load_state_dict(sd, strict=False)
assert not unexpected, unexpected
assert all("rotary" in m for m in missing), missing
layer = layer.float().to(dev).eval()


def rms(name):
    n = Qwen3NextRMSNorm(H, eps=cfg.rms_norm_eps)
    n.weight.data = W[name].clone()
    return n.float().to(dev)


pre_e, pre_h, final = rms("mtp.pre_fc_norm_embedding.weight"), rms("mtp.pre_fc_norm_hidden.weight"), rms("mtp.norm.weight")
fc = W["mtp.fc.weight"].to(dev)
embed = W["model.embed_tokens.weight"].to(dev)
head = (W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]).to(dev)
rope = Qwen3NextRotaryEmbedding(cfg).to(dev)


@torch.no_grad()
def forward(tokens, hidden):
    """Outputs after mtp.norm for slots at positions 0..T-1."""
    T = tokens.shape[0]
    x = torch.cat([pre_e(embed[tokens]), pre_h(hidden)], dim=-1) @ fc.T
    x = x[None]
    pos = torch.arange(T, device=dev)[None]
    cos, sin = rope(x, pos)
    mask = torch.full((T, T), float("-inf"), device=dev).triu(1)[None, None]
    out = layer(x, position_embeddings=(cos, sin), attention_mask=mask, position_ids=pos)
    return final(out)[0]


with safe_open(traces_path, framework="pt") as g:
    meta = g.metadata() or {}
    names = sorted(k[:-len(".tokens")] for k in g.keys() if k.endswith(".tokens"))
    traces = {n: (g.get_tensor(n + ".tokens").long().to(dev), g.get_tensor(n + ".hidden").float().to(dev)) for n in names}
K = int(meta.get("k", 3))
P = int(meta.get("prompt_len", 192))

# 1. forward reference on code_heldout.0
x, h = traces["code_heldout.0"]
out = forward(x[1:P + 1], h[:P])
assert kv_rounded[0] > 0, "the attention did not go through eager_bf16_kv (transformers changed?)"
logits = out @ head.T
arg = logits.argmax(-1)
t2 = torch.cat([x[1:P + 1], arg[P - 1:P]])
h2 = torch.cat([h[:P], out[P - 1:P]])
step = forward(t2, h2)[-1:]
step_logits = step @ head.T
save_file({"out_hidden": out.cpu().contiguous(), "argmax": arg.int().cpu(), "logits_last2": logits[-2:].cpu().contiguous(),
           "step_hidden": step.cpu().contiguous(), "step_argmax": step_logits.argmax(-1).int().cpu(),
           "step_logits": step_logits.cpu().contiguous()},
          os.path.join(out_dir, "forward_ref.safetensors"),
          metadata={"trace": "code_heldout.0", "prompt_len": str(P), "device": dev, "torch": torch.__version__,
                    "kv_cache": "bfloat16"})

# 2. the replay
stats = {}
for n, (x, h) in traces.items():
    dom = n.split(".")[0]
    s = stats.setdefault(dom, {"drafts": 0, "draft_tokens": 0, "accepted": [0] * K, "reached": [0] * K})
    N = x.shape[0]
    c = P
    while c < N - 1:
        toks = [x[1:c + 1]]
        hid = [h[:c]]
        out = forward(x[1:c + 1], h[:c])
        prev = out[-1:]
        d = [int((prev @ head.T).argmax(-1))]
        keff = min(K, N - 1 - c)
        for i in range(1, keff):
            toks.append(torch.tensor([d[-1]], device=dev))
            hid.append(prev)
            prev = forward(torch.cat(toks), torch.cat(hid))[-1:]
            d.append(int((prev @ head.T).argmax(-1)))
        a = 0
        while a < keff and d[a] == int(x[c + 1 + a]):
            a += 1
        s["drafts"] += 1
        s["draft_tokens"] += keff
        for i in range(a):
            s["accepted"][i] += 1
        for i in range(min(a + 1, keff)):
            s["reached"][i] += 1
        c += a + 1
json.dump({"k": K, "prompt_len": P, "device": dev, "torch": torch.__version__, "kv_cache": "bfloat16", "domains": stats},
          open(os.path.join(out_dir, "replay_ref.json"), "w"), indent=1)
print(json.dumps(stats))
