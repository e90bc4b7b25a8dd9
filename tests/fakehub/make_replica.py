#!/usr/bin/env python3
"""Layout replicas of real NVFP4 checkpoints for the fake Hub (issue 50):
every tensor of the real model with its real name, dtype and shape, in
shards of the real sizes, written as sparse files (the header, the F32
scalars, and a hole for everything else), so a partial fetch meets the
same headers, offsets and gaps as on the Hub at a few MB of disk.

  qwen3-next-80b: Qwen3-Next-80B-A3B in ModelOpt's NVFP4 export (48 layers,
    36 Gated DeltaNet + 12 full attention, 512 per-expert experts with
    weight / weight_scale / weight_scale_2 / input_scale, o_proj and the
    shared expert NVFP4, GDN and q/k/v projections BF16, BF16 embedding and
    head, untied; BF16 MTP layer with 512 per-expert experts); 51.3 GB.
  qwen3.5-35b: a Qwen3.5-MoE text+vision checkpoint (model.language_model.
    prefix, separate in_proj_qkv/z/b/a, 40 layers = 30 GDN + 10 full
    attention, 256 per-expert NVFP4 experts, vocab 248,320, untied, a
    vision tower) whose MTP layer keeps transformers 5's fused experts
    (gate_up_proj [E, 2I, H], down_proj [E, H, I]). target-architecture.md
    gives 40 layers and GDN 32/16 for Qwen3.5-35B-A3B; the other sizes
    (hidden 2048, 256 experts of width 512, 16 x 256 query heads over 2 KV
    heads) are this replica's assumption.

Shards are cut as save_pretrained cuts them (tensors in module order, a
new shard past 5 GB); inside a shard the data is ordered as the
safetensors library orders it (by dtype, wider first, then by name), which
is what scatters each expert's input_scale between weight_scale_2 values.
input_scale = 0.02 + layer / 10,000, weight_scale_2 = 1e-4: finite values a
recipe can read; every other byte reads as zero.

Usage: make_replica.py LAYOUT OUT_DIR TOKENIZER_JSON|-"""
import json
import os
import shutil
import struct
import sys

SIZE = {"BF16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1}
ORDER = {"F32": 0, "BF16": 1, "F8_E4M3": 2, "U8": 3}  # wider dtypes first, as safetensors writes them
SHARD_BYTES = 5 * 10**9


def nvfp4(out, name, rows, cols):
    out.append((name + ".weight", "U8", [rows, cols // 2]))
    out.append((name + ".weight_scale", "F8_E4M3", [rows, cols // 16]))
    out.append((name + ".weight_scale_2", "F32", []))
    out.append((name + ".input_scale", "F32", []))


def bf16(out, name, *shape):
    out.append((name, "BF16", list(shape)))


def moe(out, p, hidden, experts, inter, shared, quant_experts):
    bf16(out, f"{p}.mlp.gate.weight", experts, hidden)
    for e in range(experts):
        for proj, r, c in (("gate_proj", inter, hidden), ("up_proj", inter, hidden), ("down_proj", hidden, inter)):
            if quant_experts:
                nvfp4(out, f"{p}.mlp.experts.{e}.{proj}", r, c)
            else:
                bf16(out, f"{p}.mlp.experts.{e}.{proj}.weight", r, c)
    for proj, r, c in (("gate_proj", shared, hidden), ("up_proj", shared, hidden), ("down_proj", hidden, shared)):
        if quant_experts:
            nvfp4(out, f"{p}.mlp.shared_expert.{proj}", r, c)
        else:
            bf16(out, f"{p}.mlp.shared_expert.{proj}.weight", r, c)
    bf16(out, f"{p}.mlp.shared_expert_gate.weight", 1, hidden)


def attention(out, p, hidden, heads, kv, hd, o_nvfp4):
    bf16(out, f"{p}.self_attn.q_proj.weight", 2 * heads * hd, hidden)
    bf16(out, f"{p}.self_attn.k_proj.weight", kv * hd, hidden)
    bf16(out, f"{p}.self_attn.v_proj.weight", kv * hd, hidden)
    if o_nvfp4:
        nvfp4(out, f"{p}.self_attn.o_proj", hidden, heads * hd)
    else:
        bf16(out, f"{p}.self_attn.o_proj.weight", hidden, heads * hd)
    bf16(out, f"{p}.self_attn.q_norm.weight", hd)
    bf16(out, f"{p}.self_attn.k_norm.weight", hd)


def mtp_layer(t, H):
    """the MTP layer's fc, norms and attention (BF16); returns its prefix for the MLP"""
    bf16(t, "mtp.fc.weight", H, 2 * H)
    for n in ("pre_fc_norm_embedding", "pre_fc_norm_hidden", "norm"):
        bf16(t, f"mtp.{n}.weight", H)
    p = "mtp.layers.0"
    bf16(t, f"{p}.input_layernorm.weight", H)
    attention(t, p, H, 16, 2, 256, False)
    bf16(t, f"{p}.post_attention_layernorm.weight", H)
    return p


def trunk(t, m, L, V, H, E, I, S, next_layout, o_nvfp4):
    """embedding, L decoder layers (every 4th full attention, the rest Gated DeltaNet with
    Qwen3-Next's fused in_proj_qkvz/ba or Qwen3.5's separate qkv/z/b/a), NVFP4 MoE, final norm"""
    hk, hv, dk, dv = 16, 32, 128, 128
    bf16(t, f"{m}.embed_tokens.weight", V, H)
    for i in range(L):
        p = f"{m}.layers.{i}"
        bf16(t, f"{p}.input_layernorm.weight", H)
        if i % 4 == 3:
            attention(t, p, H, 16, 2, 256, o_nvfp4)
        else:
            a = f"{p}.linear_attn"
            if next_layout:
                bf16(t, f"{a}.in_proj_qkvz.weight", 2 * hk * dk + 2 * hv * dv, H)
                bf16(t, f"{a}.in_proj_ba.weight", 2 * hv, H)
            else:
                bf16(t, f"{a}.in_proj_qkv.weight", 2 * hk * dk + hv * dv, H)
                bf16(t, f"{a}.in_proj_z.weight", hv * dv, H)
                bf16(t, f"{a}.in_proj_b.weight", hv, H)
                bf16(t, f"{a}.in_proj_a.weight", hv, H)
            bf16(t, f"{a}.conv1d.weight", 2 * hk * dk + hv * dv, 1, 4)
            bf16(t, f"{a}.dt_bias", hv)
            t.append((f"{a}.A_log", "F32", [hv]))
            bf16(t, f"{a}.norm.weight", dv)
            bf16(t, f"{a}.out_proj.weight", H, hv * dv)
        bf16(t, f"{p}.post_attention_layernorm.weight", H)
        moe(t, p, H, E, I, S, True)
    bf16(t, f"{m}.norm.weight", H)
    return hk, hv, dk, dv


def qwen3_next():
    H, L, V, E, I, S = 2048, 48, 151936, 512, 512, 512
    t = []
    hk, hv, dk, dv = trunk(t, "model", L, V, H, E, I, S, True, True)
    bf16(t, "lm_head.weight", V, H)
    p = mtp_layer(t, H)
    moe(t, p, H, E, I, S, False)
    cfg = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": H,
           "num_hidden_layers": L, "vocab_size": V, "num_attention_heads": 16, "num_key_value_heads": 2,
           "head_dim": 256, "partial_rotary_factor": 0.25, "rope_theta": 10000000, "rms_norm_eps": 1e-6,
           "num_experts": E, "num_experts_per_tok": 10, "moe_intermediate_size": I,
           "shared_expert_intermediate_size": S, "norm_topk_prob": True, "decoder_sparse_step": 1,
           "intermediate_size": 5120, "linear_num_key_heads": hk, "linear_num_value_heads": hv,
           "linear_key_head_dim": dk, "linear_value_head_dim": dv, "linear_conv_kernel_dim": 4,
           "full_attention_interval": 4, "num_nextn_predict_layers": 1, "tie_word_embeddings": False,
           "max_position_embeddings": 262144, "torch_dtype": "bfloat16",
           "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}
    return t, cfg


def qwen3_5_moe():
    H, L, V, E, I, S = 2048, 40, 248320, 256, 512, 512
    t = []
    hk, hv, dk, dv = trunk(t, "model.language_model", L, V, H, E, I, S, False, False)
    for b in range(27):  # the vision tower: never read by the recipe
        v = f"model.visual.blocks.{b}"
        bf16(t, f"{v}.attn.qkv.weight", 3 * 1152, 1152)
        bf16(t, f"{v}.attn.proj.weight", 1152, 1152)
        bf16(t, f"{v}.mlp.linear_fc1.weight", 4304, 1152)
        bf16(t, f"{v}.mlp.linear_fc2.weight", 1152, 4304)
        bf16(t, f"{v}.norm1.weight", 1152)
        bf16(t, f"{v}.norm2.weight", 1152)
    bf16(t, "lm_head.weight", V, H)
    p = mtp_layer(t, H)
    bf16(t, f"{p}.mlp.gate.weight", E, H)
    bf16(t, f"{p}.mlp.experts.gate_up_proj", E, 2 * I, H)
    bf16(t, f"{p}.mlp.experts.down_proj", E, H, I)
    for proj, r, c in (("gate_proj", S, H), ("up_proj", S, H), ("down_proj", H, S)):
        bf16(t, f"{p}.mlp.shared_expert.{proj}.weight", r, c)
    bf16(t, f"{p}.mlp.shared_expert_gate.weight", 1, H)
    text = {"model_type": "qwen3_5_moe_text", "hidden_size": H, "num_hidden_layers": L, "vocab_size": V,
            "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "partial_rotary_factor": 0.25,
            "rope_theta": 10000000, "rms_norm_eps": 1e-6, "num_experts": E, "num_experts_per_tok": 8,
            "moe_intermediate_size": I, "shared_expert_intermediate_size": S, "linear_num_key_heads": hk,
            "linear_num_value_heads": hv, "linear_key_head_dim": dk, "linear_value_head_dim": dv,
            "linear_conv_kernel_dim": 4, "full_attention_interval": 4, "mtp_num_hidden_layers": 1,
            "mamba_ssm_dtype": "float32", "max_position_embeddings": 262144}
    cfg = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
           "text_config": text, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
           "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}}
    return t, cfg


def nbytes(dt, shape):
    n = SIZE[dt]
    for s in shape:
        n *= s
    return n


def write(tensors, out):
    shards, cur, size = [], [], 0
    for t in tensors:  # save_pretrained: module order, a new shard past the limit
        b = nbytes(t[1], t[2])
        if cur and size + b > SHARD_BYTES:
            shards.append(cur)
            cur, size = [], 0
        cur.append(t)
        size += b
    shards.append(cur)
    wmap, total = {}, 0
    for k, sh in enumerate(shards):
        fn = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        sh = sorted(sh, key=lambda t: (ORDER[t[1]], t[0]))
        hdr, at, scalars = {"__metadata__": {"format": "pt"}}, 0, []
        for name, dt, shape in sh:
            b = nbytes(dt, shape)
            hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [at, at + b]}
            if dt == "F32" and shape == []:
                layer = int(name.split("layers.")[1].split(".")[0]) if "layers." in name else 0
                v = 0.02 + layer / 10000 if name.endswith("input_scale") else 1e-4
                scalars.append((at, struct.pack("<f", v)))
            at += b
            wmap[name] = fn
        h = json.dumps(hdr, separators=(",", ":")).encode()
        h += b" " * (-len(h) % 8)
        with open(os.path.join(out, fn), "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h)
            base = 8 + len(h)
            for off, v in scalars:  # contiguous at the data's start: one small region of real bytes
                f.seek(base + off)
                f.write(v)
            f.truncate(base + at)
        total += base + at
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(nbytes(t[1], t[2]) for t in tensors)}, "weight_map": wmap}, f,
                  indent=2)
    return len(shards), total


def main():
    layout, out, tok = sys.argv[1:4]
    tensors, cfg = {"qwen3-next-80b": qwen3_next, "qwen3.5-35b": qwen3_5_moe}[layout]()
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    if tok != "-":  # (- : none; the runtime's benchmarks need no tokenizer)
        shutil.copy(tok, os.path.join(out, "tokenizer.json"))
    n, total = write(tensors, out)
    print(json.dumps({"layout": layout, "tensors": len(tensors), "shards": n, "bytes": total}))


if __name__ == "__main__":
    main()
