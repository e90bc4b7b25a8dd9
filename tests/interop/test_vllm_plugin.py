#!/usr/bin/env python3
"""The vLLM plugin (quant/vllm_plugin) against the pinned vLLM release.

1. The plugin byte-compiles.
2. vLLM 0.33.0's source (the wheel from PyPI, cached; MTPQ_VLLM_VERSION=X checks release X) still has every hook
   the plugin patches, with the signatures it relies on.
3. Conformance: for a quantize output (tiny model and a 16-expert fixture),
   every module prefix vLLM's MTP classes build (read from the pinned source:
   mtp.fc, qkv_proj, o_proj, shared_expert.gate_up_proj/down_proj, the
   experts, plus the plugin's mtp.draft_lm_head) resolves, through vLLM's own
   ModelOptMixedPrecisionConfig._resolve_quant_algo (executed from the pinned
   source), to the intended algorithm; the router and shared_expert_gate
   resolve to nothing; every quantized_layers key is reached by some module;
   every listed module has a static input_scale. Mutated configs (a wrong
   key, a fused key, a missing input_scale, q/k/v with mixed algorithms) must
   fail the same check.
4. With torch importable (the GPU machine): the head scatter puts the draft
   logits at their ids with -inf elsewhere, and the ids load from the repo's
   .pt (without torch this part is reported as not run).
Usage: test_vllm_plugin.py MTPQ GEN_FIXTURE TESTDATA PLUGIN_DIR
"""
import ast
import glob
import json
import os
import py_compile
import struct
import subprocess
import sys
import tempfile
import types
import zipfile

MTPQ, GEN, TESTDATA, PLUGIN = sys.argv[1:5]
TORCH_ONLY = "--torch-only" in sys.argv  # the GPU machine: torch, no network
PINNED = os.environ.get("MTPQ_VLLM_VERSION", "0.33.0")  # (another release: MTPQ_VLLM_VERSION)
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
    return cond


# 1. byte-compile
for f in glob.glob(os.path.join(PLUGIN, "mtpq_vllm", "*.py")):
    py_compile.compile(f, doraise=True)

if not TORCH_ONLY:
    # 2. the pinned source
    cache = os.environ.get("MTPQ_VLLM_CACHE", os.path.join(tempfile.gettempdir(), "mtpq-vllm-cache"))
    os.makedirs(cache, exist_ok=True)
    wheels = glob.glob(os.path.join(cache, f"vllm-{PINNED}-*.whl"))
    if not wheels:
        p = subprocess.run([sys.executable, "-m", "pip", "download", f"vllm=={PINNED}", "--no-deps",
                            "--only-binary", ":all:", "-q", "-d", cache], capture_output=True, text=True)
        wheels = glob.glob(os.path.join(cache, f"vllm-{PINNED}-*.whl"))
        if not wheels:
            print(f"skip: cannot download vllm {PINNED} from PyPI: {p.stderr.strip()[-300:]}")
            sys.exit(77)
    wh = zipfile.ZipFile(wheels[0])


    def src(path):
        return wh.read(path).decode()


    def tree(path):
        return ast.parse(src(path))


    def cls(t, name):
        return next((n for n in ast.walk(t) if isinstance(n, ast.ClassDef) and n.name == name), None)


    def meth(c, name):
        return next((n for n in c.body if isinstance(n, ast.FunctionDef) and n.name == name), None) if c else None


    M = "vllm/model_executor/models/"
    nx, q5 = tree(M + "qwen3_next_mtp.py"), tree(M + "qwen3_5_mtp.py")
    nx_src, q5_src = src(M + "qwen3_next_mtp.py"), src(M + "qwen3_5_mtp.py")
    for t, text, pred, mtp in ((nx, nx_src, "Qwen3NextMultiTokenPredictor", "Qwen3NextMTP"),
                               (q5, q5_src, "Qwen3_5MultiTokenPredictor", "Qwen3_5MTP")):
        for c in (pred, mtp):
            init = meth(cls(t, c), "__init__")
            check(init is not None and [a.arg for a in init.args.kwonlyargs] == ["vllm_config", "prefix"],
                  f"{c}.__init__(self, *, vllm_config, prefix) not found")
        cl = meth(cls(t, mtp), "compute_logits")
        check(cl is not None and [a.arg for a in cl.args.args] == ["self", "hidden_states", "spec_step_idx"],
              f"{mtp}.compute_logits signature")
        lw = ast.get_source_segment(text, meth(cls(t, mtp), "load_weights"))
        check('name.replace("mtp.", "model.")' in lw, f"{mtp}.load_weights no longer renames mtp. -> model.")
        check('prefix=f"{prefix}.fc"' in ast.get_source_segment(text, meth(cls(t, pred), "__init__")),
              f"{pred} builds fc elsewhere")
    check(cls(tree(M + "qwen3_5_mtp.py"), "Qwen3_5MoeMTP") is not None, "Qwen3_5MoeMTP missing")
    ifc = tree(M + "interfaces.py")
    check(meth(cls(ifc, "LocalArgmaxMixin"), "get_top_tokens") is not None, "LocalArgmaxMixin.get_top_tokens missing")
    check("def get_draft_quant_config(" in src(M + "utils.py"), "get_draft_quant_config missing")
    check("def configure_quant_config(" in src("vllm/model_executor/model_loader/utils.py"), "configure_quant_config missing")
    cfg_init = src("vllm/config/__init__.py")
    check('"replace"' in cfg_init and '"set_current_vllm_config"' in cfg_init, "vllm.config replace/set_current_vllm_config")
    rl = meth(cls(tree("vllm/model_executor/layers/linear.py"), "ReplicatedLinear"), "__init__")
    check(rl is not None and "return_bias" in [a.arg for a in rl.args.kwonlyargs], "ReplicatedLinear(return_bias=)")
    packed = ast.literal_eval(next(n.value for n in cls(nx, "Qwen3NextMTP").body
                                   if isinstance(n, ast.Assign) and n.targets[0].id == "packed_modules_mapping"))
    qn = src(M + "qwen3_next.py")
    for piece in ('f"{prefix}.qkv_proj"', 'f"{prefix}.o_proj"', 'f"{prefix}.experts"',
                  'f"{prefix}.shared_expert_gate"', 'f"{prefix}.gate"'):
        check(piece in qn, f"qwen3_next.py no longer builds {piece}")

    # vLLM's own resolver, executed from the pinned source with a stand-in self.
    mo = tree("vllm/model_executor/layers/quantization/modelopt.py")
    mp = cls(mo, "ModelOptMixedPrecisionConfig")
    ns = {"__builtins__": __builtins__}
    for name in ("_quantized_layer_prefix_candidates", "_resolve_quant_algo"):
        fn = meth(mp, name)
        check(fn is not None, f"ModelOptMixedPrecisionConfig.{name} missing")
        fn.decorator_list = [d for d in fn.decorator_list if not (isinstance(d, ast.Name) and d.id == "staticmethod")]
        exec(compile(ast.Module(body=[fn], type_ignores=[]), "modelopt.py", "exec"), ns)


    def resolve(layers, prefix):
        self = types.SimpleNamespace(quantized_layers=layers, packed_modules_mapping=packed)
        self._quantized_layer_prefix_candidates = lambda p: ns["_quantized_layer_prefix_candidates"](self, p) \
            if ns["_quantized_layer_prefix_candidates"].__code__.co_argcount == 2 else ns["_quantized_layer_prefix_candidates"](p)
        return ns["_resolve_quant_algo"](self, prefix)


    def load_tensors(d):
        out = {}
        for f in glob.glob(os.path.join(d, "model*.safetensors")):
            raw = open(f, "rb").read()
            n = struct.unpack("<Q", raw[:8])[0]
            for k, v in json.loads(raw[8:8 + n]).items():
                if k != "__metadata__":
                    out[k] = v
        return out


    def conformance(layers, tensors, n_experts):
        """Problems of a quantized_layers map against vLLM's MTP modules."""
        probs = []
        L = "mtp.layers.0"
        want = {"mtp.fc": "FP8", f"{L}.self_attn.qkv_proj": "FP8", f"{L}.self_attn.o_proj": "FP8",
                f"{L}.mlp.shared_expert.gate_up_proj": "FP8", f"{L}.mlp.shared_expert.down_proj": "FP8",
                "mtp.draft_lm_head": "FP8", f"{L}.mlp.experts": "NVFP4",
                f"{L}.mlp.gate": None, f"{L}.mlp.shared_expert_gate": None}
        for prefix, algo in want.items():
            try:
                got = resolve(layers, prefix)
            except ValueError as e:
                probs.append(f"{prefix}: vLLM raises {e}")
                continue
            if got != algo:
                probs.append(f"{prefix}: resolves to {got}, want {algo}")
        reach = set()
        for prefix in want:
            last = prefix.rsplit(".", 1)[-1]
            base = prefix.rsplit(".", 1)[0]
            reach.add(prefix)
            for shard in packed.get(last, []):
                reach.add(f"{base}.{shard}")
        for k in layers:
            if k not in reach and not k.startswith(f"{L}.mlp.experts."):
                probs.append(f"key {k} is reached by no module vLLM builds")
            if k.endswith(tuple(packed)):
                probs.append(f"fused key {k}")
            if not k + ".input_scale" in tensors:
                probs.append(f"{k} has no input_scale")
        experts = {k for k in layers if k.startswith(f"{L}.mlp.experts.")}
        if len(experts) != 3 * n_experts:
            probs.append(f"{len(experts)} expert keys, want {3 * n_experts}")
        return probs


with tempfile.TemporaryDirectory() as tmp:
    T = os.path.join(TESTDATA, "tiny-qwen3next")
    vp = os.path.join(tmp, "dv")
    subprocess.run([MTPQ, "build-vocab", "-t", os.path.join(T, "model", "tokenizer.json"), "-c",
                    os.path.join(T, "counts", "prose_train.tsv"), "-n", "40000", "--out", vp], check=True,
                   capture_output=True)
    fx = os.path.join(tmp, "fx")
    subprocess.run([GEN, fx, "--hidden", "64", "--experts", "16", "--inter", "32", "--heads", "2", "--kv", "1",
                    "--head-dim", "32", "--vocab", "151936"], check=True)
    runs = (("fixture", fx, 16),) if TORCH_ONLY else (("tiny", os.path.join(T, "model"), 16), ("fixture", fx, 16))
    for label, target, ne in runs:
        out = os.path.join(tmp, label + "-out")
        subprocess.run([MTPQ, "quantize", target, "--vocab", vp + ".safetensors", "--out", out,
                        "--expert-input-scale", "0.1667"], check=True, capture_output=True)
        if TORCH_ONLY:
            continue
        layers = json.load(open(os.path.join(out, "config.json")))["quantization_config"]["quantized_layers"]
        tensors = load_tensors(out)
        probs = conformance(layers, tensors, ne)
        check(not probs, f"{label}: {probs[:5]}")
        # the check must catch each kind of mistake
        mutants = {
            "wrong key": ({**layers, "model.layers.0.self_attn.q_proj": {"quant_algo": "FP8"}}, tensors),
            "fused key": ({**layers, "mtp.layers.0.self_attn.qkv_proj": {"quant_algo": "FP8"}}, tensors),
            "missing input_scale": (layers, {k: v for k, v in tensors.items() if k != "mtp.fc.input_scale"}),
            "mixed q/k/v": ({**layers, "mtp.layers.0.self_attn.k_proj": {"quant_algo": "NVFP4"}}, tensors),
            "missing expert": ({k: v for k, v in layers.items() if k != "mtp.layers.0.mlp.experts.3.up_proj"}, tensors),
        }
        for what, (lay, ten) in mutants.items():
            check(conformance(lay, ten, ne), f"{label}: conformance does not catch a {what}")
    # the repo's plugin installs and registers its vLLM entry point
    if not TORCH_ONLY:
        venv = os.path.join(tmp, "venv")
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        vpy = os.path.join(venv, "bin", "python")
        # (no dependencies: vLLM itself is not installed here; pip builds the
        # package with setuptools from PyPI in its isolated build environment)
        p = subprocess.run([vpy, "-m", "pip", "install", "-q", "--no-deps",
                            os.path.join(tmp, "tiny-out", "vllm_plugin")], capture_output=True, text=True)
        check(p.returncode == 0, f"pip install of the repo's vllm_plugin failed: {p.stderr[-300:]}")
        ep = subprocess.run([vpy, "-c", "import importlib.metadata as m; print([e.value for e in "
                             "m.entry_points(group='vllm.general_plugins')])"], capture_output=True, text=True)
        check("mtpq_vllm:register" in ep.stdout, f"entry point not registered: {ep.stdout} {ep.stderr}")
        # no hard dependency on vLLM (pip must never replace a serving host's vLLM); the pinned range is an extra
        rq = subprocess.run([vpy, "-c", "import importlib.metadata as m; print(m.requires('mtpq-vllm'))"],
                            capture_output=True, text=True)
        reqs = eval(rq.stdout.strip() or "None") or []
        check(all("extra ==" in r for r in reqs if r.startswith("vllm")) and any(r.startswith("vllm") for r in reqs),
              f"the plugin's requirements: {reqs}")
        check(open(os.path.join(tmp, "tiny-out", "vllm_plugin", "mtpq_vllm", "patch.py")).read() ==
              open(os.path.join(PLUGIN, "mtpq_vllm", "patch.py")).read(), "the repo's plugin differs from the source")
    # 4. head scatter: on a NumPy stand-in always, with torch where it exists
    sys.path.insert(0, PLUGIN)
    from mtpq_vllm.head import scatter_logits, top_tokens
    import numpy as np

    class Arr(np.ndarray):  # the tensor methods head.py uses
        device = "cpu"

        def new_full(self, shape, value):
            return np.full(shape, value, dtype=self.dtype).view(Arr)

        def to(self, device):
            return self

        def argmax(self, dim=-1):
            return np.asarray(self).argmax(axis=dim)

    rng = np.random.default_rng(3)
    ids_np = np.sort(rng.choice(1000, 300, replace=False)).view(Arr)
    small = rng.standard_normal((4, 300)).astype(np.float32).view(Arr)
    full = np.asarray(scatter_logits(small, ids_np, 1000))
    rest = np.setdiff1d(np.arange(1000), np.asarray(ids_np))
    check(full.shape == (4, 1000) and np.array_equal(full[:, np.asarray(ids_np)], np.asarray(small)) and
          np.isneginf(full[:, rest]).all(), "scatter (NumPy stand-in): logits not at their ids / not -inf elsewhere")
    check(np.array_equal(np.asarray(top_tokens(small, ids_np)), full.argmax(-1)), "top tokens (NumPy stand-in)")
    try:
        import torch
    except ImportError:
        torch = None
        print("not run: .pt loading and the scatter with real torch (torch is not installed here)")
    if torch is not None:
        from mtpq_vllm.head import load_draft_vocab_ids
        out = os.path.join(tmp, "fixture-out")
        ids = load_draft_vocab_ids(out, 40000, 151936)
        check(ids.dtype == torch.int64 and ids.shape == (40000,), "ids")
        small = torch.randn(5, 40000)
        full = scatter_logits(small, ids, 151936)
        mask = torch.ones(151936, dtype=torch.bool)
        mask[ids] = False
        check(torch.equal(full[:, ids], small) and bool(torch.isinf(full[:, mask]).all()), "scatter")
        check(torch.equal(full.argmax(-1), top_tokens(small, ids)), "top tokens")
        try:
            load_draft_vocab_ids(out, 39999, 151936)
            check(False, "a size mismatch must be refused")
        except ValueError:
            pass
        print("head scatter and .pt loading checked with torch", torch.__version__)

    # 5. the patched MTP class's __init__ (the first live vLLM run failed there: register_buffer over an
    # attribute of the same name), on a class built like vLLM's (orig __init__ sets .model and .config), over
    # torch's nn.Module where torch exists, else over a stand-in with nn.Module's buffer rules
    from mtpq_vllm import head as head_mod
    from mtpq_vllm.patch import _patch_mtp

    class StandIn:  # nn.Module's rules for buffers, as far as the patch touches them
        def __init__(self):
            object.__setattr__(self, "_buffers", {})

        def register_buffer(self, name, value, persistent=True):
            if hasattr(self, name) and name not in self._buffers:
                raise KeyError(f"attribute '{name}' already exists")
            self._buffers[name] = value

        def __getattr__(self, name):
            b = self.__dict__.get("_buffers", {})
            if name in b:
                return b[name]
            raise AttributeError(name)

        def __setattr__(self, name, value):
            if name in self.__dict__.get("_buffers", {}):
                self._buffers[name] = value
            else:
                object.__setattr__(self, name, value)

    base = torch.nn.Module if torch is not None else StandIn
    for reduced in (True, False):
        class FakeMTP(base):
            def __init__(self, *, vllm_config, prefix=""):
                super().__init__()
                self.model = types.SimpleNamespace(draft_lm_head=object() if reduced else None, draft_vocab_size=7)
                self.config = types.SimpleNamespace(vocab_size=50)

            def compute_logits(self, hidden_states, spec_step_idx=0):
                return "stock logits"

        loaded = []
        saved = head_mod.load_draft_vocab_ids
        head_mod.load_draft_vocab_ids = lambda d, n, v: loaded.append((d, n, v)) or list(range(n))
        try:
            _patch_mtp(FakeMTP)
            cfg = types.SimpleNamespace(speculative_config=types.SimpleNamespace(
                draft_model_config=types.SimpleNamespace(model=tmp)))
            m = FakeMTP(vllm_config=cfg)
            check(reduced == (m._mtpq_ids is not None), f"patched __init__ (reduced head {reduced}): _mtpq_ids")
            check(loaded == ([(tmp, 7, 50)] if reduced else []), f"patched __init__: ids loaded {loaded}")
            if not reduced:
                check(m.compute_logits(None) == "stock logits", "no reduced head: the stock compute_logits")
        except Exception as e:  # noqa: BLE001
            check(False, f"patched __init__ (reduced head {reduced}) raised {type(e).__name__}: {e}")
        finally:
            head_mod.load_draft_vocab_ids = saved

if failures:
    for m in failures:
        print("FAIL:", m)
    print(f"0 passed, {len(failures)} failed")
    sys.exit(1)
print("vllm plugin: all checks passed" + ("" if TORCH_ONLY else f" (pinned vLLM {PINNED} source checked)"))
