#!/usr/bin/env python3
"""`mtpq quantize org/name` on layout replicas of real NVFP4 checkpoints at
their real sizes (tests/fakehub/make_replica.py: Qwen3-Next-80B-A3B with
per-expert experts, 51 GB in 11 shards; a Qwen3.5-MoE with a vision tower and
fused MTP experts, 25 GB in 6 shards; sparse files), served by the fake Hub.
From the server's log, for each:
- every file is resolved at most once (HEAD or GET on /resolve/), and only
  files the recipe reads; at most 3 API calls (revision, tree);
- at most 200 requests reach the store in all;
- the bytes served are at least the bytes the recipe reads and at most 1.1x
  of them, where the recipe's bytes are the small files, every shard's
  header and the tensors this test selects by its own rule: mtp.*, the
  untied head, the expert input_scales of the last trunk layer;
- the fetched index names exactly those tensors, and quantize succeeds;
- stderr, not a terminal, has a progress line at each quarter of the fetch.
Slow (about a minute and 7 GB of scratch disk, freed at the end).
Usage: test_hub_scale.py MTPQ TESTDATA"""
import collections
import glob
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

MTPQ, TESTDATA = sys.argv[1:3]
HERE = os.path.dirname(os.path.abspath(__file__))
FAKEHUB = os.path.join(HERE, "..", "fakehub", "fakehub.py")
REPLICA = os.path.join(HERE, "..", "fakehub", "make_replica.py")
MODEL = os.path.join(TESTDATA, "tiny-qwen3next", "model")
failures = []


def check(c, m):
    print(("ok   " if c else "FAIL ") + m)
    if not c:
        failures.append(m)


def recipe(d):
    """names the recipe reads, and its bytes: small files + headers + those tensors"""
    heads, names = {}, {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            with open(os.path.join(d, f), "rb") as fp:
                n = struct.unpack("<Q", fp.read(8))[0]
                h = json.loads(fp.read(n))
            heads[f] = n
            for k, v in h.items():
                if k != "__metadata__":
                    names[k] = v["data_offsets"][1] - v["data_offsets"][0]
    trunk = "model.language_model." if any(k.startswith("model.language_model.") for k in names) else "model."
    pat = re.compile(re.escape(trunk) + r"layers\.(\d+)\.mlp\.experts\..*_proj\.input_scale$")
    last = max(int(m.group(1)) for m in map(pat.match, names) if m)
    keep = {k for k in names if k.startswith("mtp.") or k.startswith("lm_head.")
            or ((m := pat.match(k)) and int(m.group(1)) == last)}
    small = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if not f.endswith(".safetensors"))
    return keep, small + sum(8 + n for n in heads.values()) + sum(names[k] for k in keep)


with tempfile.TemporaryDirectory() as tmp:
    reps = {}
    for layout, rid in (("qwen3-next-80b", "org/Qwen3-Next-80B-A3B-NVFP4"), ("qwen3.5-35b", "org/Qwen3.5-MoE-NVFP4")):
        d = os.path.join(tmp, layout)
        info = json.loads(subprocess.run([sys.executable, REPLICA, layout, d, os.path.join(MODEL, "tokenizer.json")],
                                         check=True, capture_output=True, text=True).stdout)
        print(f"replica {layout}: {info['tensors']} tensors in {info['shards']} shards, {info['bytes'] / 1e9:.1f} GB")
        reps[rid] = d
    log = os.path.join(tmp, "hub.log")
    cmd = [sys.executable, FAKEHUB, "--log", log] + [a for rid, d in reps.items() for a in ("--replica", f"{rid}={d}")]
    srv = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        port = json.loads(srv.stdout.readline())["hub"]
        ids = os.path.join(tmp, "ids")
        subprocess.run([MTPQ, "build-vocab", "--tokenizer", os.path.join(MODEL, "tokenizer.json"), "--counts",
                        os.path.join(TESTDATA, "tiny-qwen3next", "counts", "code_train.tsv"), "--size", "98304",
                        "--out", ids], check=True, capture_output=True)
        for rid, d in reps.items():
            cache = os.path.join(tmp, "cache")
            env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HUB_CACHE=cache)
            for k in ("HF_TOKEN", "HF_HUB_OFFLINE"):
                env.pop(k, None)
            open(log, "w").close()
            out = os.path.join(tmp, "out")
            p = subprocess.run([MTPQ, "quantize", rid, "--vocab", ids + ".safetensors", "--out", out],
                               capture_output=True, text=True, env=env)
            print(p.stderr.strip())
            check(p.returncode == 0 and os.path.exists(os.path.join(out, "mtpq_manifest.json")),
                  f"{rid}: quantize exit {p.returncode}")
            logged = re.findall(r"mtpq: fetched .* \((\d+)%\) at", p.stderr)
            check(logged == ["25", "50", "75", "100"], f"{rid}: a log's progress lines at each quarter: {logged}")
            reqs = [json.loads(x) for x in open(log)]
            resolves = collections.Counter(x["path"].split("/resolve/", 1)[1].split("/", 1)[1]
                                           for x in reqs if x["server"] == "hub" and "/resolve/" in x["path"])
            api = [x for x in reqs if x["server"] == "hub" and x["path"].startswith("/api/")]
            store = [x for x in reqs if x["server"] == "store"]
            served = sum(x["bytes"] for x in reqs if x["server"] == "store" or "/resolve/" in x["path"])
            keep, want = recipe(d)
            shards = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
            print(f"{rid}: {sum(resolves.values())} resolves for {len(resolves)} files ({len(shards)} shards), "
                  f"{len(api)} API calls, {len(store)} store requests, {served / 1e6:.1f} MB served, "
                  f"recipe {want / 1e6:.1f} MB ({served / want:.4f}x)")
            check(max(resolves.values()) == 1, f"{rid}: each file resolved at most once (most: {resolves.most_common(1)})")
            check(set(resolves) <= set(os.listdir(d)), f"{rid}: only files of the repo resolved")
            check(len(api) <= 3, f"{rid}: {len(api)} API calls (at most 3)")
            check(len(store) <= 200, f"{rid}: {len(store)} store requests (budget 200)")
            check(want <= served <= 1.1 * want, f"{rid}: served {served} bytes for a recipe of {want} (at most 1.1x)")
            idx = glob.glob(os.path.join(cache, ".mtpq-partial", "*", "*", "model.safetensors.index.json"))
            got = set(json.load(open(idx[0]))["weight_map"]) if len(idx) == 1 else set()
            check(got == keep, f"{rid}: fetched {len(got)} tensors, the recipe reads {len(keep)} "
                               f"(extra {sorted(got - keep)[:3]}, missing {sorted(keep - got)[:3]})")
            subprocess.run(["rm", "-rf", cache, out])
    finally:
        srv.terminate()
        srv.wait()

if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("hub at scale: all checks passed")
