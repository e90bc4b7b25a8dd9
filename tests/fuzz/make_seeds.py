#!/usr/bin/env python3
"""Seed corpora for the libFuzzer harnesses, made from testdata (run once;
the corpora then grow by `run.sh BUILD SECONDS --grow`). Writes
tests/fuzz/corpus/NAME/seed-* (small files: the harnesses read whole inputs).
Usage: make_seeds.py TESTDATA"""
import json
import os
import struct
import subprocess
import sys

T = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))


def put(name, tag, data):
    d = os.path.join(HERE, "corpus", name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + tag), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def st(tensors, meta=None):
    """a safetensors file: tensors = [(name, dtype, shape, bytes)]"""
    h, off, body = {}, 0, b""
    if meta:
        h["__metadata__"] = meta
    for n, dt, shape, b in tensors:
        h[n] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
        body += b
    hj = json.dumps(h).encode()
    hj += b" " * (-len(hj) % 8)
    return struct.pack("<Q", len(hj)) + hj + body


# safetensors
put("safetensors", "two", st([("a.weight", "BF16", [2, 2], bytes(8)), ("b", "F32", [3], bytes(12))], {"k": "v"}))
put("safetensors", "fp8", st([("mtp.fc.weight", "F8_E4M3", [4, 4], bytes(range(16))),
                              ("mtp.fc.weight_scale", "F32", [], struct.pack("<f", 0.5))]))
put("safetensors", "empty", st([]))
put("safetensors", "u8", st([("x", "U8", [0], b""), ("y", "I64", [1], bytes(8))]))
# config.json
for root, _, files in os.walk(T):
    for f in files:
        if f == "config.json":
            put("config", os.path.basename(root), open(os.path.join(root, f), "rb").read())
# shard index
put("index", "tiny", open(os.path.join(T, "tiny-qwen3next/model/model.safetensors.index.json"), "rb").read())
put("index", "small", json.dumps({"metadata": {"total_size": 8}, "weight_map": {"a": "m-1.safetensors",
                                                                               "b": "m-2.safetensors"}}))
# tokenizer.json: the real one cut to 400 tokens and the merges among them
tok = json.load(open(os.path.join(T, "tiny-qwen3next/model/tokenizer.json"), encoding="utf-8"))
vocab = dict(sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])[:400])
merges = []
for m in tok["model"]["merges"]:
    a, b = m if isinstance(m, list) else m.split(" ", 1)
    if a in vocab and b in vocab and a + b in vocab:
        merges.append(m)
tok["model"]["vocab"], tok["model"]["merges"] = vocab, merges
tok["added_tokens"] = [t for t in tok["added_tokens"]][:4]
for t in tok["added_tokens"]:
    t["id"] = 400 + tok["added_tokens"].index(t)
put("tokenizer", "mini", json.dumps(tok, ensure_ascii=False))
# count files: plain (first byte even) and zstd (odd)
tsv = b"".join(b"%d\t%d\n" % (i, 1000 - i) for i in range(0, 400, 7))
put("counts", "plain", b"\x00" + tsv)
put("counts", "zst", b"\x01" + subprocess.run(["zstd", "-q", "-c"], input=tsv, capture_output=True, check=True).stdout)
# traces: two short traces with hidden states, metadata
tr = []
for i, dom in enumerate(("code", "prose")):
    toks = struct.pack("<6i", *[(i * 7 + j) % 300 for j in range(6)])
    tr += [(f"{dom}.0.tokens", "I32", [6], toks), (f"{dom}.0.hidden", "BF16", [6, 128], bytes(6 * 128 * 2))]
put("traces", "two", st(tr, {"k": "3", "prompt_len": "4"}))
# JSON: the Hub's answer shapes
put("json", "revision", json.dumps({"sha": "0" * 40, "siblings": [{"rfilename": "config.json"}]}))
put("json", "tree", json.dumps([{"type": "file", "path": "a.safetensors", "size": 8,
                                 "lfs": {"oid": "ab" * 32, "size": 8}}]))
put("json", "preupload", json.dumps({"files": [{"path": "a", "uploadMode": "lfs", "shouldIgnore": False}]}))
put("json", "lfs", json.dumps({"objects": [{"oid": "ab" * 32, "size": 3, "actions": {
    "upload": {"href": "http://x/u", "header": {"a": "b"}}}}]}))
put("json", "chat", json.dumps({"messages": [{"role": "user", "content": "hi \u00e9"}]}))
