#!/usr/bin/env python3
"""Give a tied checkpoint its own lm_head.weight (a byte copy of
model.embed_tokens.weight in a shard of its own) and set
tie_word_embeddings to false, in place: the same function, loadable by
vLLM 0.26's Qwen3NextForCausalLM, which builds lm_head without reading
tie_word_embeddings and so leaves it unloaded for a tied checkpoint (the
first live run: every output token 0). Usage: untie.py MODEL_DIR"""
import json
import os
import struct
import sys

d = sys.argv[1]
cfg_path = os.path.join(d, "config.json")
cfg = json.load(open(cfg_path))
idx_path = os.path.join(d, "model.safetensors.index.json")
idx = json.load(open(idx_path))
wm = idx["weight_map"]
if not cfg.get("tie_word_embeddings") or "lm_head.weight" in wm:
    print("untie: nothing to do")
    sys.exit(0)
src = os.path.join(d, wm["model.embed_tokens.weight"])
with open(src, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    hdr = json.loads(f.read(n))
    e = hdr["model.embed_tokens.weight"]
    a, b = e["data_offsets"]
    f.seek(8 + n + a)
    data = f.read(b - a)
h = json.dumps({"lm_head.weight": {"dtype": e["dtype"], "shape": e["shape"], "data_offsets": [0, len(data)]}}).encode()
h += b" " * (-len(h) % 8)
name = "model-lm_head.safetensors"
with open(os.path.join(d, name), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + data)
wm["lm_head.weight"] = name
json.dump(idx, open(idx_path, "w"), indent=2)
cfg["tie_word_embeddings"] = False
json.dump(cfg, open(cfg_path, "w"), indent=2)
print(f"untie: lm_head.weight {e['shape']} {e['dtype']} copied from {os.path.basename(src)} into {name}")
