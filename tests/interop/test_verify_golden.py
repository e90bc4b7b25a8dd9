#!/usr/bin/env python3
"""verify-bitexact against ModelOpt's own bytes (testdata/golden).

Builds SOURCE (the BF16 inputs as X.weight) and REFERENCE (ModelOpt's NVFP4
and FP8 outputs under the same names) from each golden file, then checks:
  - `mtpq verify-bitexact --requantize` with the matching arithmetic reports
    every tensor identical (exit 0), for the f32 and modelopt-qtensor recipes;
  - with the other arithmetic it reports exactly the tensors whose bytes the
    two torch arithmetics disagree on (exit 9);
  - a single flipped bit in REFERENCE is pinpointed (tensor, part, element,
    row/col, both values), in requantize and in compare mode.
Usage: test_verify_golden.py MTPQ TESTDATA
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    from safetensors import TensorSpec, deserialize, serialize_file
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

MTPQ, TESTDATA = sys.argv[1:3]
PY = {"U8": "uint8", "F8_E4M3": "float8_e4m3fn", "F32": "float32", "BF16": "bfloat16"}
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)


def load(path):
    with open(path, "rb") as f:
        return {k: (v["dtype"], list(v["shape"]), bytes(v["data"])) for k, v in deserialize(f.read())}


def save(path, tensors):
    keep, specs = [], {}
    for name, (dt, shape, raw) in tensors.items():
        arr = np.frombuffer(raw, dtype=np.uint8).copy()
        keep.append(arr)
        specs[name] = TensorSpec(dtype=PY[dt], shape=shape, data_ptr=arr.ctypes.data, data_len=len(raw))
    serialize_file(specs, path)


def verify(*args):
    p = subprocess.run([MTPQ, "verify-bitexact", "--json", *args], capture_output=True, text=True)
    try:
        rep = json.loads(p.stdout)
    except json.JSONDecodeError:
        rep = None
        print(p.stderr)
    return p.returncode, rep


def build(g, tmp, tag):
    src, ref_f32, ref_qt = {}, {}, {}
    for case in ("typ", "tail", "edge", "odd", "big"):
        n = f"nvfp4.{case}"
        src[f"{n}.weight"] = g[f"{n}.input"]
        for part in ("weight", "weight_scale", "weight_scale_2"):
            ref_f32[f"{n}.{part}"] = g[f"{n}.{part}"]
    dt, shape, raw = g["nvfp4.experts.input"]
    per = len(raw) // shape[0]
    for e in range(shape[0]):
        n = f"nvfp4.experts.{e}"
        src[f"{n}.weight"] = ("BF16", shape[1:], raw[e * per:(e + 1) * per])
        for part in ("weight", "weight_scale", "weight_scale_2"):
            ref_f32[f"{n}.{part}"] = g[f"{n}.{part}"]
    for case in ("typ", "tail", "edge"):
        n = f"fp8.{case}"
        src[f"{n}.weight"] = g[f"{n}.input"]
        ref_f32[f"{n}.weight"] = g[f"{n}.weight"]
        ref_f32[f"{n}.weight_scale"] = g[f"{n}.weight_scale"]
        ref_qt[f"{n}.weight"] = g[f"{n}.modelopt_weight"]
        ref_qt[f"{n}.weight_scale"] = g[f"{n}.modelopt_weight_scale"]
    paths = [os.path.join(tmp, f"{tag}_{x}.safetensors") for x in ("src", "ref", "refqt")]
    for p, t in zip(paths, (src, ref_f32, ref_qt)):
        save(p, t)
    return paths


with tempfile.TemporaryDirectory() as tmp:
    golden = {arith: load(os.path.join(TESTDATA, "golden", f"nvfp4_fp8_golden_torch{arith}.safetensors"))
              for arith in ("cuda", "cpu")}
    built = {arith: build(g, tmp, arith) for arith, g in golden.items()}
    # Tensors whose bytes differ between the two arithmetics (fact of the golden data).
    differ = {k.rsplit(".", 1)[0] for k in golden["cuda"]
              if golden["cuda"][k] != golden["cpu"][k] and not k.startswith("e4m3")}
    differ = {k[:-len(".weight")] if k.endswith(".weight") else k for k in differ}
    differ = {k.replace(".weight_scale", "") for k in differ}
    for arith, (src, ref, refqt) in built.items():
        rc, rep = verify("--requantize", "--arith", arith, src, ref)
        check(rc == 0 and rep and rep["identical"], f"{arith}: requantize not identical: rc={rc}")
        check(rep and rep["summary"]["tensors"] == 12, f"{arith}: {rep and rep['summary']}")
        rc, rep = verify("--requantize", "--arith", arith, "--fp8-recipe", "modelopt-qtensor", src, refqt)
        check(rc == 0 and rep and rep["identical"], f"{arith}: modelopt-qtensor not identical: rc={rc}")
        other = "cpu" if arith == "cuda" else "cuda"
        rc, rep = verify("--requantize", "--arith", other, src, ref)
        bad = {t["name"] for t in rep["tensors"] if t["result"] != "identical"} if rep else None
        check(rc == 9 and bad == differ, f"{arith} ref with {other} arith: rc={rc} differs={bad} want={differ}")

    # A single flipped bit: weight byte 1000 of nvfp4.typ, high nibble bit 1.
    src, ref, _ = built["cuda"]
    t = load(ref)
    dt, shape, raw = t["nvfp4.typ.weight"]
    b = bytearray(raw)
    b[1000] ^= 0x20
    t["nvfp4.typ.weight"] = (dt, shape, bytes(b))
    flipped = os.path.join(tmp, "flipped.safetensors")
    save(flipped, t)
    old = raw[1000] >> 4
    new = b[1000] >> 4
    rc, rep = verify("--requantize", src, flipped)
    bad = [x for x in rep["tensors"] if x["result"] != "identical"]
    check(rc == 9 and len(bad) == 1 and bad[0]["name"] == "nvfp4.typ", f"flip: {rc} {bad}")
    if bad:
        m = bad[0]["first_mismatches"][0]
        row, col = divmod(1000 * 2 + 1, 512)
        check(bad[0]["bytes_differ"] == 1 and bad[0]["elements_differ"] == 1, f"flip counts {bad[0]}")
        check((m["part"], m["index"], m["row"], m["col"], m["a_bits"], m["b_bits"]) ==
              ("weight", 2001, row, col, old, new), f"flip location {m}")
    rc, rep = verify(ref, flipped)
    bad = [x for x in rep["tensors"] if x["result"] != "identical"]
    check(rc == 9 and len(bad) == 1 and bad[0]["kind"] == "nvfp4" and
          bad[0]["first_mismatches"][0]["index"] == 2001, f"compare flip: {rc} {bad}")
    rc, rep = verify(ref, ref)
    check(rc == 0 and rep["identical"] and rep["summary"]["identical"] == 33, f"self compare {rc} {rep and rep['summary']}")
    # The text report names the tensor, part, row/col and both values.
    txt = subprocess.run([MTPQ, "verify-bitexact", "--requantize", src, flipped], capture_output=True, text=True).stdout
    check(f"weight [{row}, {col}]" in txt and "DIFFERS    nvfp4.typ" in txt, "text report:\n" + txt)

if failures:
    for f in failures:
        print("FAIL:", f)
    print(f"0 passed, {len(failures)} failed")
    sys.exit(1)
print("verify golden: all checks passed")
