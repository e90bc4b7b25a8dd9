#!/usr/bin/env python3
"""Interop with the reference implementation (PyPI `safetensors`, Rust core).

1. Files mtpq writes load in `safetensors` with identical names, dtypes,
   shapes and bytes (sha256 of what mtpq wrote vs what safetensors reads).
2. Files `safetensors` writes (every dtype, scalars, metadata) load in mtpq
   with identical names, dtypes, shapes and bytes.
3. Both readers agree on the tiny model's shards.
4. mtpq inspect --json reports the same tensor list as `safetensors`.

Usage: test_safetensors.py ST_TOOL MTPQ TESTDATA. Exits 77 (skip) when the
peer package is missing.
"""
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from safetensors import TensorSpec, deserialize, safe_open, serialize_file
except ImportError as e:  # the peers are installed by .ci/run
    print(f"skip: {e}")
    sys.exit(77)

ST_TOOL, MTPQ, TESTDATA = sys.argv[1:4]
# safetensors' Python-facing dtype names for each header dtype.
PY_DTYPE = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
            "I32": "int32", "U32": "uint32", "I64": "int64", "U64": "uint64",
            "F16": "float16", "BF16": "bfloat16", "F32": "float32", "F64": "float64",
            "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
SIZE = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "I32": 4, "U32": 4, "I64": 8,
        "U64": 8, "F16": 2, "BF16": 2, "F32": 4, "F64": 8, "F8_E4M3": 1, "F8_E5M2": 1}
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)


def parse_lines(text):
    out = {}
    for line in text.strip().splitlines():
        name, dtype, shape, digest = line.split(" ")
        dims = [] if shape == "-" else [int(x) for x in shape.split(",")]
        out[name] = (dtype, dims, digest)
    return out


def py_view(path):
    with open(path, "rb") as f:
        items = deserialize(f.read())
    return {name: (t["dtype"], list(t["shape"]), hashlib.sha256(bytes(t["data"])).hexdigest())
            for name, t in items}


with tempfile.TemporaryDirectory() as tmp:
    # 1. mtpq -> safetensors
    for seed in (1, 2, 3):
        path = os.path.join(tmp, f"mtpq_{seed}.safetensors")
        wrote = parse_lines(subprocess.run([ST_TOOL, "write", path, str(seed)], check=True,
                                           capture_output=True, text=True).stdout)
        check(len(wrote) == 45, f"seed {seed}: wrote {len(wrote)} tensors")
        seen = py_view(path)
        check(seen == wrote, f"seed {seed}: safetensors reads different tensors than mtpq wrote")
        with safe_open(path, framework="numpy") as f:
            check(f.metadata() == {"format": "pt", "writer": "mtpq st_tool"},
                  f"seed {seed}: metadata {f.metadata()}")

    # 2. safetensors -> mtpq
    rng = random.Random(7)
    keep = []
    specs = {}
    for i, (dt, py) in enumerate(PY_DTYPE.items()):
        for rank in (0, 1, 2, 3):
            shape = [rng.randint(1, 6) for _ in range(rank)]
            n = SIZE[dt]
            for d in shape:
                n *= d
            raw = bytes(rng.getrandbits(8) & (1 if dt == "BOOL" else 255) for _ in range(n))
            arr = np.frombuffer(raw, dtype=np.uint8).copy()
            keep.append(arr)
            name = f"py.{i}.{dt}.r{rank}"
            specs[name] = TensorSpec(dtype=py, shape=shape, data_ptr=arr.ctypes.data, data_len=n)
    path = os.path.join(tmp, "py.safetensors")
    serialize_file(specs, path, metadata={"origin": "python"})
    want = py_view(path)
    got = parse_lines(subprocess.run([ST_TOOL, "dump", path], check=True, capture_output=True,
                                     text=True).stdout)
    check(len(want) == 60, f"python wrote {len(want)} tensors")
    diff = [k for k in sorted(set(got) | set(want)) if got.get(k) != want.get(k)]
    check(not diff, f"mtpq reads different tensors than safetensors wrote: {diff[:3]} "
          f"mtpq={[got.get(k) for k in diff[:1]]} safetensors={[want.get(k) for k in diff[:1]]}")

    # 3 + 4. The tiny model: both readers, and inspect --json.
    model = os.path.join(TESTDATA, "tiny-qwen3next", "model")
    want = {}
    for shard in sorted(os.listdir(model)):
        if shard.endswith(".safetensors"):
            for k, v in py_view(os.path.join(model, shard)).items():
                want[k] = v
    got = parse_lines(subprocess.run([ST_TOOL, "dump", model], check=True, capture_output=True,
                                     text=True).stdout)
    check(got == want, "tiny model: mtpq and safetensors disagree")
    rep = json.loads(subprocess.run([MTPQ, "inspect", "--json", model], check=True,
                                    capture_output=True, text=True).stdout)
    check(len(rep["tensors"]) == 311, f"inspect: {len(rep['tensors'])} tensors")
    check({t["name"]: (t["dtype"], t["shape"]) for t in rep["tensors"]} ==
          {k: (v[0], v[1]) for k, v in want.items()}, "inspect --json tensor list differs")

if failures:
    for f in failures:
        print("FAIL:", f)
    print(f"0 passed, {len(failures)} failed")
    sys.exit(1)
print("interop: all checks passed")
