#!/usr/bin/env python3
"""mtpq quantize end to end.

On the tiny trained model (draft vocabulary from build-vocab) and on
synthetic fixtures (Qwen3-Next per-expert, Qwen3.5-MoE fused under the
multimodal prefix, an NVFP4-style target with expert input_scale):
  - every NVFP4/FP8 tensor is confirmed by `verify-bitexact --requantize`;
  - the safetensors load in the `safetensors` package;
  - config.json passes a conformance check derived from vLLM's rules
    (formats.md 6-7, vllm-integration.md 9): flat modelopt MIXED_PRECISION,
    keys in mtp. space, one per unfused projection, every expert, no
    wildcards, no fused names, no substring-colliding ignore entries, every
    FP8 linear and NVFP4 expert has a static input_scale, shapes and dtypes
    as vLLM creates its parameters, gate/up share weight_scale_2 and
    input_scale, router and shared_expert_gate stay BF16;
  - the ids .pt is a torch.save archive of the same ids; the manifest's
    sha256 match the files; the card has the front matter;
  - two runs give identical bytes; a killed run leaves no output directory;
  - bad inputs fail with their exit code and leave nothing behind.
Usage: test_quantize.py MTPQ GEN_FIXTURE TESTDATA
"""
import hashlib
import io
import json
import os
import pickle
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zipfile

try:
    from safetensors import deserialize
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

MTPQ, GEN, TESTDATA = sys.argv[1:4]
TINY = os.path.join(TESTDATA, "tiny-qwen3next")
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)


def run(*args, **kw):
    return subprocess.run([MTPQ, *args], capture_output=True, text=True, **kw)


def load_repo(d):
    files = [f for f in os.listdir(d) if f.endswith(".safetensors") and not f.startswith("mtp_draft")]
    out = {}
    for f in files:
        with open(os.path.join(d, f), "rb") as fh:
            for k, v in deserialize(fh.read()):
                out[k] = (v["dtype"], list(v["shape"]), bytes(v["data"]))
    return out


def f32(b):
    return struct.unpack("<f", b)[0]


def conformance(out, n_experts, n_ids, hidden, label):
    cfg = json.load(open(os.path.join(out, "config.json")))
    q = cfg.get("quantization_config", {})
    t = load_repo(out)
    check(q.get("quant_method") == "modelopt" and q.get("quant_algo") == "MIXED_PRECISION", f"{label}: {q.get('quant_method')}")
    check("quantization" not in q, f"{label}: nested quantization block in config.json")
    layers = q.get("quantized_layers", {})
    check(cfg.get("mtp_draft_vocab_size") == n_ids, f"{label}: mtp_draft_vocab_size {cfg.get('mtp_draft_vocab_size')}")
    for k in layers:
        check(k.startswith("mtp."), f"{label}: key {k} not in mtp. space")
        check(not any(c in k for c in "*?[]"), f"{label}: wildcard key {k}")
        check(not k.endswith(("qkv_proj", "gate_up_proj")), f"{label}: fused key {k}")
    want_fp8 = ["mtp.fc", "mtp.draft_lm_head"] + [f"mtp.layers.0.self_attn.{p}_proj" for p in "qkvo"] + \
               [f"mtp.layers.0.mlp.shared_expert.{p}_proj" for p in ("gate", "up", "down")]
    for k in want_fp8:
        check(layers.get(k) == {"quant_algo": "FP8"}, f"{label}: {k} -> {layers.get(k)}")
    for e in range(n_experts):
        for p in ("gate", "up", "down"):
            k = f"mtp.layers.0.mlp.experts.{e}.{p}_proj"
            check(layers.get(k) == {"quant_algo": "NVFP4", "group_size": 16}, f"{label}: {k} -> {layers.get(k)}")
    check(len(layers) == len(want_fp8) + 3 * n_experts, f"{label}: {len(layers)} keys")
    for k in ("mtp.layers.0.mlp.gate", "mtp.layers.0.mlp.shared_expert_gate"):
        check(k not in layers and t.get(k + ".weight", ("",))[0] == "BF16", f"{label}: {k} must stay BF16 and unlisted")
    for ig in q.get("ignore", []):
        check(not any(ig in k or k in ig for k in layers), f"{label}: ignore entry {ig} collides")
    for k, v in layers.items():
        w = t.get(k + ".weight")
        s = t.get(k + ".weight_scale")
        i = t.get(k + ".input_scale")
        check(w and s and i, f"{label}: {k} lacks weight/weight_scale/input_scale")
        if not (w and s and i):
            continue
        check(i[0] == "F32" and i[1] == [] and f32(i[2]) > 0, f"{label}: {k}.input_scale {i[:2]}")
        if v["quant_algo"] == "FP8":
            check(w[0] == "F8_E4M3" and len(w[1]) == 2, f"{label}: {k}.weight {w[:2]}")
            check(s[0] == "F32" and s[1] == [], f"{label}: {k}.weight_scale {s[:2]}")
        else:
            s2 = t.get(k + ".weight_scale_2")
            check(w[0] == "U8" and s[0] == "F8_E4M3" and s2 and s2[0] == "F32" and s2[1] == [], f"{label}: {k} dtypes")
            check(s[1] == [w[1][0], w[1][1] * 2 // 16], f"{label}: {k} scale shape {s[1]} for weight {w[1]}")
    for e in range(n_experts):
        g, u = f"mtp.layers.0.mlp.experts.{e}.gate_proj", f"mtp.layers.0.mlp.experts.{e}.up_proj"
        for part in (".weight_scale_2", ".input_scale"):
            check(t[g + part][2] == t[u + part][2], f"{label}: expert {e} gate/up {part} differ")
    head = t["mtp.draft_lm_head.weight"]
    check(head[1] == [n_ids, hidden], f"{label}: head shape {head[1]}")
    hq = json.load(open(os.path.join(out, "hf_quant_config.json")))
    check(hq["quantization"]["quant_algo"] == "MIXED_PRECISION" and hq["quantization"]["quantized_layers"] == layers,
          f"{label}: hf_quant_config.json differs")
    # manifest and card
    man = json.load(open(os.path.join(out, "mtpq_manifest.json")))
    for name, info in man["files"].items():
        data = open(os.path.join(out, name), "rb").read()
        check(hashlib.sha256(data).hexdigest() == info["sha256"], f"{label}: manifest sha256 of {name}")
    card = open(os.path.join(out, "README.md")).read()
    check(card.startswith("---\nbase_model: ") and "base_model_relation: quantized" in card and
          "library_name: vllm" in card and "--speculative-config" in card, f"{label}: model card")
    # ids .pt
    z = zipfile.ZipFile(os.path.join(out, "mtp_draft_vocab_ids.pt"))
    data = z.read("archive/data/0")
    check(len(data) == 8 * n_ids, f"{label}: .pt storage")
    return t


def verify(target, out, label):
    p = run("verify-bitexact", "--requantize", "--json", target, out)
    rep = json.loads(p.stdout) if p.stdout else {}
    check(p.returncode == 0 and rep.get("identical"), f"{label}: verify-bitexact rc={p.returncode} {rep.get('summary')}")
    return rep


def write_ids(path, ids):
    h = json.dumps({"ids": {"dtype": "I64", "shape": [len(ids)], "data_offsets": [0, 8 * len(ids)]}}).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + struct.pack(f"<{len(ids)}q", *ids))


def nothing_left(parent, base, label):
    left = [f for f in os.listdir(parent) if f == base or f.startswith("." + base + ".mtpq-tmp")]
    check(not left, f"{label}: left behind {left}")


with tempfile.TemporaryDirectory() as tmp:
    # tiny trained model
    vp = os.path.join(tmp, "dv")
    p = run("build-vocab", "-t", os.path.join(TINY, "model", "tokenizer.json"),
            "-c", os.path.join(TINY, "counts", "code_train.tsv"), "-c", os.path.join(TINY, "counts", "prose_train.tsv"),
            "-n", "98304", "--out", vp)
    check(p.returncode == 0, f"build-vocab: {p.stderr}")
    out = os.path.join(tmp, "tiny-mtpfp8")
    args = ["quantize", os.path.join(TINY, "model"), "--vocab", vp + ".safetensors", "--out", out,
            "--expert-input-scale", "0.1667"]
    p = run(*args)
    check(p.returncode == 0, f"quantize tiny: {p.stderr}")
    conformance(out, 16, 98304, 128, "tiny")
    rep = verify(os.path.join(TINY, "model"), out, "tiny")
    check(rep.get("summary", {}).get("tensors") == 57, f"tiny: verified {rep.get('summary')}")
    # determinism: same arguments, same bytes
    moved = out + "-first"
    os.rename(out, moved)
    p = run(*args)
    def files(d):
        return sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs)
    same = all(open(os.path.join(out, f), "rb").read() == open(os.path.join(moved, f), "rb").read()
               for f in files(moved))
    check(p.returncode == 0 and files(out) == files(moved) and same, "tiny: not deterministic")
    check("vllm_plugin/mtpq_vllm/patch.py" in files(out), "the repo has no vllm_plugin")
    # existing output without --force
    p = run(*args)
    check(p.returncode == 10 and "--force" in p.stderr, f"exists: rc={p.returncode} {p.stderr}")
    p = run(*args, "--force")
    check(p.returncode == 0, f"--force: {p.stderr}")
    # dry run writes nothing
    dry = os.path.join(tmp, "dry")
    p = run("quantize", os.path.join(TINY, "model"), "--vocab", vp + ".safetensors", "--out", dry,
            "--expert-input-scale", "0.1667", "--dry-run")
    check(p.returncode == 0 and "draft head:" in p.stdout and not os.path.exists(dry), "dry-run")
    # BF16 target without an input scale: refused
    p = run("quantize", os.path.join(TINY, "model"), "--vocab", vp + ".safetensors", "--out", dry)
    check(p.returncode == 2 and "--expert-input-scale" in p.stderr, f"no input scale: {p.returncode}")
    nothing_left(tmp, "dry", "no input scale")

    # fixtures: per-expert NVFP4-style target, fused Qwen3.5-MoE
    small = ["--hidden", "64", "--experts", "8", "--inter", "32", "--heads", "2", "--kv", "1", "--head-dim", "32",
             "--vocab", "1000"]
    ids = os.path.join(tmp, "ids.safetensors")
    write_ids(ids, list(range(0, 1000, 3)))
    for label, extra in (("next", ["--nvfp4-target"]), ("qwen35moe", ["--layout", "qwen35moe"])):
        fx = os.path.join(tmp, label)
        subprocess.run([GEN, fx, *small, *extra], check=True)
        o = fx + "-out"
        qargs = ["quantize", fx, "--vocab", ids, "--out", o] + (["--expert-input-scale", "0.2"] if label != "next" else [])
        p = run(*qargs)
        check(p.returncode == 0, f"{label}: {p.stderr}")
        t = conformance(o, 8, 334, 64, label)
        verify(fx, o, label)
        if label == "qwen35moe":  # sharded output: index + shards, same tensors
            so = fx + "-sharded"
            p = run(*qargs[:4], "--out", so, "--expert-input-scale", "0.2", "--max-shard-size", "20000")
            idx = json.load(open(os.path.join(so, "model.safetensors.index.json")))
            shards = sorted(f for f in os.listdir(so) if f.startswith("model-"))
            check(p.returncode == 0 and len(shards) > 1 and set(idx["weight_map"].values()) == set(shards),
                  f"sharding: {shards}")
            check(load_repo(so) == t, "sharded repo holds different tensors")
            verify(fx, so, "sharded")
        if label == "next":  # 2 x the largest last-layer expert input_scale
            cfgin = load_repo(fx)
            gu = max(f32(v[2]) for k, v in cfgin.items() if k.endswith(("gate_proj.input_scale", "up_proj.input_scale")))
            check(abs(f32(t["mtp.layers.0.mlp.experts.3.gate_proj.input_scale"][2]) - 2 * gu) < 1e-7, "derived input_scale")
    # bad inputs
    cases = [("nomtp", ["--bad", "nomtp"], 4, "no mtp"), ("width", ["--hidden", "72"], 4, "not divisible by the NVFP4"),
             ("nan", ["--bad", "nan"], 4, "NaN")]
    for label, extra, rc, msg in cases:
        fx = os.path.join(tmp, "bad-" + label)
        args_ = [a for a in small if a not in ("64",)] if label == "width" else small
        gen = [GEN, fx, *small, *extra] if label != "width" else [GEN, fx, "--hidden", "72", "--experts", "2",
                                                                  "--inter", "32", "--heads", "2", "--kv", "1",
                                                                  "--head-dim", "32", "--vocab", "1000"]
        subprocess.run(gen, check=True)
        p = run("quantize", fx, "--vocab", ids, "--out", fx + "-out", "--expert-input-scale", "0.2")
        check(p.returncode == rc and msg in p.stderr, f"bad {label}: rc={p.returncode} {p.stderr.strip()}")
        nothing_left(tmp, "bad-" + label + "-out", label)
    fx = os.path.join(tmp, "next")
    for label, idv in (("range", [1, 5, 1000]), ("order", [5, 3])):
        bad_ids = os.path.join(tmp, f"ids-{label}.safetensors")
        write_ids(bad_ids, idv)
        p = run("quantize", fx, "--vocab", bad_ids, "--out", os.path.join(tmp, "bo"))
        check(p.returncode == 4 and "ids[" in p.stderr, f"ids {label}: rc={p.returncode} {p.stderr.strip()}")
        nothing_left(tmp, "bo", "ids " + label)
    # a killed run leaves no output directory; the next run cleans up
    big = os.path.join(tmp, "big")
    subprocess.run([GEN, big, "--hidden", "1024", "--experts", "64", "--inter", "512", "--heads", "4", "--kv", "1",
                    "--head-dim", "128", "--vocab", "1000", "--nvfp4-target"], check=True)
    for sig in (signal.SIGKILL, signal.SIGTERM):
        kout = os.path.join(tmp, "killed")
        proc = subprocess.Popen([MTPQ, "quantize", big, "--vocab", ids, "--out", kout, "-j", "1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # Signal only once this run's own temporary directory exists (named
        # by its pid), so the kill lands mid-write on any machine speed (a
        # fixed sleep raced on loaded CI), and after the run has removed the
        # SIGKILL run's stale one: any ".killed.mtpq-tmp" matched that stale
        # directory at once, and a SIGTERM that then landed before the
        # clean-up left it behind (seen once in a fresh clone's .ci/run).
        own = f".killed.mtpq-tmp.{proc.pid}"
        deadline = time.time() + 30
        while time.time() < deadline and proc.poll() is None:
            if own in os.listdir(tmp):
                break
            time.sleep(0.005)
        time.sleep(0.05)
        check(proc.poll() is None, f"{sig.name}: quantize finished before it could be killed; enlarge the fixture")
        proc.send_signal(sig)
        proc.wait()
        check(not os.path.exists(kout), f"{sig.name}: output directory exists after the kill (rc {proc.returncode})")
        if sig == signal.SIGTERM:
            nothing_left(tmp, "killed", "SIGTERM")
    p = run("quantize", big, "--vocab", ids, "--out", os.path.join(tmp, "killed"))
    check(p.returncode == 0, f"after kill: {p.stderr}")
    nothing_left_tmp = [f for f in os.listdir(tmp) if f.startswith(".killed.mtpq-tmp")]
    check(not nothing_left_tmp, f"stale temporary directories remain: {nothing_left_tmp}")

if failures:
    for m in failures:
        print("FAIL:", m)
    print(f"0 passed, {len(failures)} failed")
    sys.exit(1)
print("quantize: all checks passed")
