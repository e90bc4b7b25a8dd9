#!/usr/bin/env python3
"""Small random hybrid Qwen3-Next / Qwen3.5 models (Gated DeltaNet + gated
full attention, dense MLP, tied head) and a float32 numpy implementation of
../shared/docs/target-architecture.md to check mtpq's target model against.

make_model(dir, layout, seed) writes config.json + model.safetensors (BF16
weights; dt_bias and A_log F32, as checkpoints keep them) and returns
(config, float32 weights, tensor-name prefix); ref_forward(config, weights,
prefix, ids) gives the final-norm hidden state of every position.
`python3 hybrid_ref.py OUTDIR` writes the two models testdata/target holds:
OUTDIR/hybrid-next (Qwen3-Next: interleaved in_proj_qkvz / in_proj_ba,
model.), OUTDIR/hybrid-35 (Qwen3.5: in_proj_qkv / z / b / a,
model.language_model.) and OUTDIR/hybrid-mtp (Qwen3-Next's layout with an
MTP layer: the sampled live loop's chi-square test runs it with its own
drafter).
"""
import json
import os
import sys

import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy)
import numpy as np
from safetensors.numpy import save_file

bf = ml_dtypes.bfloat16


def rms1(x, w, eps):  # (1 + w) RMSNorm
    return x / np.sqrt(np.mean(x.astype(np.float64) ** 2) + eps).astype(np.float32) * (1.0 + w)


def silu(x):
    return x / (1.0 + np.exp(-x))


def make_model(d, layout, seed, mtp=False):
    rng = np.random.default_rng(seed)
    H, V, I = 48, 300, 64
    Nq, Nkv, D = 4, 2, 16
    HK, HV, dk, dv, K = 2, 4, 8, 12, 4
    kd, vd = HK * dk, HV * dv
    pre = "model.language_model." if layout == "qwen3_5" else "model."
    W = {}

    def w(name, *shape, s=0.15):
        W[name] = (rng.standard_normal(shape) * s).astype(np.float32).astype(bf)

    w(pre + "embed_tokens.weight", V, H, s=0.5)
    w(pre + "norm.weight", H, s=0.1)
    types = ["linear_attention", "full_attention", "linear_attention"]
    for i, t in enumerate(types):
        L = f"{pre}layers.{i}."
        w(L + "input_layernorm.weight", H, s=0.1)
        w(L + "post_attention_layernorm.weight", H, s=0.1)
        if t == "full_attention":
            w(L + "self_attn.q_proj.weight", 2 * Nq * D, H)
            w(L + "self_attn.k_proj.weight", Nkv * D, H)
            w(L + "self_attn.v_proj.weight", Nkv * D, H)
            w(L + "self_attn.o_proj.weight", H, Nq * D)
            w(L + "self_attn.q_norm.weight", D, s=0.1)
            w(L + "self_attn.k_norm.weight", D, s=0.1)
        else:
            A = L + "linear_attn."
            if layout == "qwen3_next":
                w(A + "in_proj_qkvz.weight", 2 * kd + 2 * vd, H)
                w(A + "in_proj_ba.weight", 2 * HV, H)
            else:
                w(A + "in_proj_qkv.weight", 2 * kd + vd, H)
                w(A + "in_proj_z.weight", vd, H)
                w(A + "in_proj_b.weight", HV, H)
                w(A + "in_proj_a.weight", HV, H)
            w(A + "conv1d.weight", 2 * kd + vd, 1, K, s=0.4)
            W[A + "dt_bias"] = (rng.standard_normal(HV) * 0.5).astype(np.float32)  # F32, as checkpoints keep it
            W[A + "A_log"] = np.log(rng.uniform(1, 8, HV)).astype(np.float32)
            W[A + "norm.weight"] = (1.0 + rng.standard_normal(dv) * 0.1).astype(np.float32).astype(bf)
            w(A + "out_proj.weight", H, vd)
        w(L + "mlp.gate_proj.weight", I, H)
        w(L + "mlp.up_proj.weight", I, H)
        w(L + "mlp.down_proj.weight", H, I)
    if mtp:  # an MTP layer (dense MLP), drawn from its own generator: the trunk stays the seed's
        r2 = np.random.default_rng(seed + 1000)

        def m(name, *shape, s=0.15):
            W[name] = (r2.standard_normal(shape) * s).astype(np.float32).astype(bf)

        m("mtp.fc.weight", H, 2 * H)
        for n in ("mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight",
                  "mtp.layers.0.input_layernorm.weight", "mtp.layers.0.post_attention_layernorm.weight"):
            m(n, H, s=0.1)
        A = "mtp.layers.0.self_attn."
        m(A + "q_proj.weight", 2 * Nq * D, H)
        m(A + "k_proj.weight", Nkv * D, H)
        m(A + "v_proj.weight", Nkv * D, H)
        m(A + "o_proj.weight", H, Nq * D)
        m(A + "q_norm.weight", D, s=0.1)
        m(A + "k_norm.weight", D, s=0.1)
        m("mtp.layers.0.mlp.gate_proj.weight", I, H)
        m("mtp.layers.0.mlp.up_proj.weight", I, H)
        m("mtp.layers.0.mlp.down_proj.weight", H, I)
    os.makedirs(d, exist_ok=True)
    save_file(W, os.path.join(d, "model.safetensors"))
    cfg = {"architectures": ["Qwen3NextForCausalLM" if layout == "qwen3_next" else "Qwen3_5ForCausalLM"],
           "model_type": "qwen3_next" if layout == "qwen3_next" else "qwen3_5_text",
           "vocab_size": V, "hidden_size": H, "intermediate_size": I, "num_hidden_layers": len(types),
           "num_attention_heads": Nq, "num_key_value_heads": Nkv, "head_dim": D, "rms_norm_eps": 1e-6,
           "rope_theta": 10000.0, "partial_rotary_factor": 0.5, "tie_word_embeddings": True,
           "linear_num_key_heads": HK, "linear_num_value_heads": HV, "linear_key_head_dim": dk,
           "linear_value_head_dim": dv, "linear_conv_kernel_dim": K, "layer_types": types}
    if mtp:
        cfg["mtp_num_hidden_layers"] = 1
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    Wf = {k: v.astype(np.float32) for k, v in W.items()}
    return cfg, Wf, pre


def ref_forward(cfg, W, pre, ids):
    """float32 numpy forward of every position (target-architecture.md): hidden [T, H]"""
    H, eps = cfg["hidden_size"], 1e-6
    Nq, Nkv, D = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    HK, HV, dk, dv, K = (cfg[k] for k in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                          "linear_value_head_dim", "linear_conv_kernel_dim"))
    rot = int(D * cfg["partial_rotary_factor"])
    r, kd, vd = HV // HK, HK * dk, HV * dv
    T = len(ids)
    h = W[pre + "embed_tokens.weight"][ids].copy()
    for i, t in enumerate(cfg["layer_types"]):
        L = f"{pre}layers.{i}."
        x = np.stack([rms1(h[p], W[L + "input_layernorm.weight"], eps) for p in range(T)])
        if t == "full_attention":
            q = x @ W[L + "self_attn.q_proj.weight"].T
            k = x @ W[L + "self_attn.k_proj.weight"].T
            v = x @ W[L + "self_attn.v_proj.weight"].T
            q = q.reshape(T, Nq, 2 * D)
            q, gate = q[:, :, :D].copy(), q[:, :, D:]
            k = k.reshape(T, Nkv, D).copy()
            v = v.reshape(T, Nkv, D)
            for p in range(T):
                for hh in range(Nq):
                    q[p, hh] = rms1(q[p, hh], W[L + "self_attn.q_norm.weight"], eps)
                for hh in range(Nkv):
                    k[p, hh] = rms1(k[p, hh], W[L + "self_attn.k_norm.weight"], eps)
            inv = 10000.0 ** (-2.0 * np.arange(rot // 2) / rot)
            for p in range(T):
                c, s = np.cos(p * inv).astype(np.float32), np.sin(p * inv).astype(np.float32)
                for arr in (q[p], k[p]):
                    a, b = arr[:, :rot // 2].copy(), arr[:, rot // 2:rot].copy()
                    arr[:, :rot // 2], arr[:, rot // 2:rot] = a * c - b * s, b * c + a * s
            o = np.zeros((T, Nq, D), np.float32)
            for p in range(T):
                for hh in range(Nq):
                    g = hh // (Nq // Nkv)
                    sc = (k[:p + 1, g] @ q[p, hh]) / np.sqrt(D)
                    e = np.exp(sc - sc.max())
                    o[p, hh] = (e / e.sum()) @ v[:p + 1, g]
            o = o * (1.0 / (1.0 + np.exp(-gate)))
            y = o.reshape(T, Nq * D) @ W[L + "self_attn.o_proj.weight"].T
        else:
            A = L + "linear_attn."
            if (A + "in_proj_qkvz.weight") in W:
                pz = x @ W[A + "in_proj_qkvz.weight"].T
                ba = x @ W[A + "in_proj_ba.weight"].T
                grp = pz.reshape(T, HK, 2 * dk + 2 * r * dv)
                q = grp[:, :, :dk].reshape(T, kd)
                kk = grp[:, :, dk:2 * dk].reshape(T, kd)
                v = grp[:, :, 2 * dk:2 * dk + r * dv].reshape(T, vd)
                z = grp[:, :, 2 * dk + r * dv:].reshape(T, vd)
                bag = ba.reshape(T, HK, 2 * r)
                b, a = bag[:, :, :r].reshape(T, HV), bag[:, :, r:].reshape(T, HV)
                mix = np.concatenate([q, kk, v], 1)
            else:
                mix = x @ W[A + "in_proj_qkv.weight"].T
                z = x @ W[A + "in_proj_z.weight"].T
                b = x @ W[A + "in_proj_b.weight"].T
                a = x @ W[A + "in_proj_a.weight"].T
            cw = W[A + "conv1d.weight"][:, 0, :]
            pad = np.concatenate([np.zeros((K - 1, mix.shape[1]), np.float32), mix], 0)
            conv = np.stack([silu((cw * pad[p:p + K].T).sum(1)) for p in range(T)])
            q, kk, v = conv[:, :kd].reshape(T, HK, dk), conv[:, kd:2 * kd].reshape(T, HK, dk), conv[:, 2 * kd:]
            q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) / np.sqrt(dk)
            kk = kk / np.sqrt((kk * kk).sum(-1, keepdims=True) + 1e-6)
            beta = 1.0 / (1.0 + np.exp(-b))
            g = -np.exp(W[A + "A_log"]) * np.log1p(np.exp(a + W[A + "dt_bias"]))
            S = np.zeros((HV, dk, dv), np.float32)
            o = np.zeros((T, HV, dv), np.float32)
            v = v.reshape(T, HV, dv)
            for p in range(T):
                for hv in range(HV):
                    kh, qh = kk[p, hv // r], q[p, hv // r]
                    S[hv] *= np.exp(g[p, hv])
                    u = S[hv].T @ kh
                    S[hv] += np.outer(kh, beta[p, hv] * (v[p, hv] - u))
                    o[p, hv] = S[hv].T @ qh
            on = o / np.sqrt((o * o).mean(-1, keepdims=True) + eps)
            o = W[A + "norm.weight"] * on * silu(z.reshape(T, HV, dv))
            y = o.reshape(T, vd) @ W[A + "out_proj.weight"].T
        h = h + y
        x = np.stack([rms1(h[p], W[L + "post_attention_layernorm.weight"], eps) for p in range(T)])
        m = (silu(x @ W[L + "mlp.gate_proj.weight"].T) * (x @ W[L + "mlp.up_proj.weight"].T)) @ \
            W[L + "mlp.down_proj.weight"].T
        h = h + m
    return np.stack([rms1(h[p], W[pre + "norm.weight"], eps) for p in range(T)])



if __name__ == "__main__":
    out = sys.argv[1]
    for name, layout, seed, mtp in (("hybrid-next", "qwen3_next", 5, False), ("hybrid-35", "qwen3_5", 6, False),
                                    ("hybrid-mtp", "qwen3_next", 7, True)):
        make_model(os.path.join(out, name), layout, seed, mtp)
        print(os.path.join(out, name))
