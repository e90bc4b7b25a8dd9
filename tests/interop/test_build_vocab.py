#!/usr/bin/env python3
"""build-vocab against an independent computation in Python.

Runs `mtpq build-vocab` on the tiny model's train counts (code weight 1,
prose weight 10) with held-out code and prose, then recomputes everything
from tokenizer.json and the count files with plain Python: the forced
classes (added tokens, single-character vocabulary strings, tokens whose
bytes are one UTF-8 code point), the ranking (weighted count desc, id asc),
the selected ids and the coverage at every reported size. Also checks that
PREFIX.safetensors holds the ids (I64, ascending) and that PREFIX.pt is a
torch.save zip whose pickle rebuilds the same int64 tensor (unpickled with a
stand-in for torch, which CI does not have).
Usage: test_build_vocab.py MTPQ TESTDATA
"""
import io
import json
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import zipfile

MTPQ, TESTDATA = sys.argv[1:3]
T = os.path.join(TESTDATA, "tiny-qwen3next")
TOK = os.path.join(T, "model", "tokenizer.json")
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)


def bytes_to_unicode():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def counts(path):
    out = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                i, c = line.split("\t")
                out[int(i)] = out.get(int(i), 0) + int(c)
    return out


tj = json.load(open(TOK, encoding="utf-8"))
inv = bytes_to_unicode()
vocab = tj["model"]["vocab"]
added = {a["id"] for a in tj["added_tokens"]}
token_bytes = {i: bytes(inv[ch] for ch in s) for s, i in vocab.items()}
for a in tj["added_tokens"]:
    token_bytes.setdefault(a["id"], a["content"].encode())
forced = set(added)
n_single_char = n_single_cp = 0
for s, i in vocab.items():
    if i in added:
        continue
    if len(s) == 1:
        forced.add(i)
        n_single_char += 1
        continue
    try:
        if len(token_bytes[i].decode("utf-8")) == 1:
            forced.add(i)
            n_single_cp += 1
    except UnicodeDecodeError:
        pass
weights = {}
for name, wt in (("code_train", 1.0), ("prose_train", 10.0)):
    for i, c in counts(os.path.join(T, "counts", name + ".tsv")).items():
        weights[i] = weights.get(i, 0.0) + c * wt
rest = sorted((i for i in token_bytes if i not in forced), key=lambda i: (-weights.get(i, 0.0), i))
order = sorted(forced) + rest

with tempfile.TemporaryDirectory() as tmp:
    prefix = os.path.join(tmp, "dv")
    cmd = [MTPQ, "build-vocab", "--tokenizer", TOK,
           "--counts", os.path.join(T, "counts", "code_train.tsv"),
           "--counts", os.path.join(T, "counts", "prose_train.tsv") + ":10",
           "--heldout", "code_heldout=" + os.path.join(T, "counts", "code_heldout.tsv"),
           "--heldout", "prose_heldout=" + os.path.join(T, "counts", "prose_heldout.tsv"),
           "--size", "98304", "--out", prefix, "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    check(p.returncode == 0, f"build-vocab failed: {p.stderr}")
    rep = json.loads(p.stdout)
    check(rep == json.load(open(prefix + ".json")), "stdout report differs from PREFIX.json")
    check(rep["size"] == 98304, f"size {rep['size']}")
    f = rep["forced"]
    check((f["added"], f["single_char_strings"], f["single_unicode_char"], f["total"]) ==
          (len(added), n_single_char, n_single_cp, len(forced)), f"forced {f} vs python "
          f"{(len(added), n_single_char, n_single_cp, len(forced))}")
    want = sorted(order[:98304])
    # ids: safetensors
    raw = open(prefix + ".safetensors", "rb").read()
    hl = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + hl])
    t = hdr["ids"]
    check(t["dtype"] == "I64" and t["shape"] == [98304], f"ids tensor {t}")
    s, e = t["data_offsets"]
    got = list(struct.unpack(f"<{98304}q", raw[8 + hl + s:8 + hl + e]))
    check(got == want, "selected ids differ from the independent selection")
    check(forced <= set(got), "a forced id is missing")
    # ids: .pt, unpickled with a stand-in for torch
    z = zipfile.ZipFile(prefix + ".pt")
    names = z.namelist()
    check(names == ["archive/data.pkl", "archive/byteorder", "archive/data/0", "archive/version"], names)
    storage = z.read("archive/data/0")

    class Unp(pickle.Unpickler):
        def find_class(self, mod, name):
            if (mod, name) == ("torch._utils", "_rebuild_tensor_v2"):
                return lambda st, off, size, stride, rg, hooks: ("tensor", st, off, size, stride, rg)
            if (mod, name) == ("torch", "LongStorage"):
                return "LongStorage"
            if (mod, name) == ("collections", "OrderedDict"):
                import collections
                return collections.OrderedDict
            raise pickle.UnpicklingError(f"unexpected global {mod}.{name}")

        def persistent_load(self, pid):
            check(pid == ("storage", "LongStorage", "0", "cpu", 98304), f"persistent id {pid}")
            return storage

    obj = Unp(io.BytesIO(z.read("archive/data.pkl"))).load()
    check(obj[0] == "tensor" and obj[2:] == (0, (98304,), (1,), False), f"pickle {obj[:1] + obj[2:]}")
    check(list(struct.unpack("<98304q", obj[1])) == want, ".pt ids differ")
    check(z.read("archive/byteorder") == b"little" and z.read("archive/version") == b"3\n", "pt metadata")
    # coverage at every size, recomputed
    for name in ("code_heldout", "prose_heldout"):
        h = counts(os.path.join(T, "counts", name + ".tsv"))
        total = sum(h.values())
        def cov(k):
            sel = set(order[:k])
            return sum(c for i, c in h.items() if i in sel) / total
        r = rep["heldout"][name]
        check(r["tokens"] == total, f"{name} tokens {r['tokens']} vs {total}")
        check(abs(r["coverage"] - cov(98304)) < 1e-12, f"{name} coverage {r['coverage']} vs {cov(98304)}")
        for k in ("32768", "65536", "98304", "131072"):
            check(abs(r["coverage_at"][k] - cov(int(k))) < 1e-12, f"{name} coverage_at {k}")
    # determinism: a second run gives identical bytes
    p2 = subprocess.run(cmd[:-3] + ["--out", prefix + "2"], capture_output=True, text=True)
    for ext in (".safetensors", ".pt"):
        check(open(prefix + ext, "rb").read() == open(prefix + "2" + ext, "rb").read(), f"{ext} not deterministic")
    print(f"python: forced {len(forced)}, selected 98304; code coverage {rep['heldout']['code_heldout']['coverage']:.6f}, "
          f"prose {rep['heldout']['prose_heldout']['coverage']:.6f}")

if failures:
    for m in failures:
        print("FAIL:", m)
    print(f"0 passed, {len(failures)} failed")
    sys.exit(1)
print("build-vocab: all checks passed")
