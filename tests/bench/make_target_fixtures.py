#!/usr/bin/env python3
"""Reference fixtures for the runtime's target model, made once with
transformers (on the GPU machine, which has it; float32, TF32 off, on the
CPU of that machine so that the sums are plain float32 ones).

Usage: make_target_fixtures.py OUTDIR

For each tiny random config below: OUTDIR/NAME/ holds the model
(save_pretrained: config.json + model.safetensors) and OUTDIR/NAME/ref.safetensors:
  ids            I64 [P + N]   the prompt (P = 64 random ids) and the N = 16
                               greedy continuation tokens
  prefill_logits F32 [P, V]    logits of the prompt's forward
  decode_logits  F32 [N, V]    logits of each greedy decode step (one token at a time
                               with the cache), the first from the prefill's last row
  hidden         F32 [P + N, H] the final-norm hidden state at every position
                               (prefill, then each decode step)
  conv.L, rec.L  F32           the GDN conv and recurrent states of layer L after the
                               prefill, as transformers' cache holds them
The metadata says how each was made (versions, seeds, config names).
"""
import json
import os
import sys

import torch

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.set_grad_enabled(False)

import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

P, N = 64, 16


def qwen3_next():
    cfg = transformers.Qwen3NextConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4, num_experts=8,
        num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        partial_rotary_factor=0.25, rms_norm_eps=1e-6, max_position_embeddings=256, tie_word_embeddings=False,
        initializer_range=0.1, norm_topk_prob=True)
    return cfg, transformers.Qwen3NextForCausalLM


def qwen3_5_moe():
    C = getattr(transformers, "Qwen3_5MoeTextConfig", None)
    M = getattr(transformers, "Qwen3_5MoeForCausalLM", None)
    if C is None or M is None:
        return None
    cfg = C(vocab_size=512, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, linear_num_key_heads=2, linear_num_value_heads=8, linear_key_head_dim=16,
            linear_value_head_dim=16, linear_conv_kernel_dim=4, num_experts=8, num_experts_per_tok=2,
            moe_intermediate_size=32, shared_expert_intermediate_size=32,
            layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
            rms_norm_eps=1e-6, max_position_embeddings=256, tie_word_embeddings=False, initializer_range=0.1)
    return cfg, M


def qwen3_5_dense():
    C = getattr(transformers, "Qwen3_5TextConfig", None)
    M = getattr(transformers, "Qwen3_5ForCausalLM", None)
    if C is None or M is None:
        return None
    cfg = C(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
            layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
            rms_norm_eps=1e-6, max_position_embeddings=256, tie_word_embeddings=True, initializer_range=0.1)
    return cfg, M


def cache_states(cache, nl):
    """transformers' GDN cache fields, whatever this version names them"""
    out = {}
    for L in range(nl):
        for key, names in (("conv", ("conv_states",)), ("rec", ("recurrent_states", "ssm_states"))):
            for nm in names:
                v = getattr(cache, nm, None)
                if v is not None and L < len(v) and v[L] is not None and torch.is_tensor(v[L]):
                    out[f"{key}.{L}"] = v[L].float().contiguous().cpu()
                    break
        layers = getattr(cache, "layers", None)  # (transformers 5: per-layer cache objects)
        if layers is not None and L < len(layers):
            for attr, key in (("conv_states", "conv"), ("recurrent_states", "rec")):
                v = getattr(layers[L], attr, None)
                if torch.is_tensor(v) and f"{key}.{L}" not in out:
                    out[f"{key}.{L}"] = v.float().contiguous().cpu()
    return out


def make(name, spec, outdir):
    if spec is None:
        print(f"{name}: this transformers ({transformers.__version__}) has no such classes: skipped")
        return
    cfg, cls = spec
    torch.manual_seed(1234)
    model = cls(cfg).float().eval()
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    g = torch.Generator().manual_seed(99)
    ids = torch.randint(0, cfg.vocab_size, (1, P), generator=g)
    out = model(input_ids=ids, use_cache=True, output_hidden_states=True)
    prefill_logits = out.logits[0].float().clone()
    hidden = [out.hidden_states[-1][0].float().clone()]
    states = cache_states(out.past_key_values, cfg.num_hidden_layers)
    cache = out.past_key_values
    toks, dl = [], []
    nxt = int(prefill_logits[-1].argmax())
    for i in range(N):
        toks.append(nxt)
        o = model(input_ids=torch.tensor([[nxt]]), past_key_values=cache, use_cache=True, output_hidden_states=True)
        cache = o.past_key_values
        dl.append(o.logits[0, -1].float().clone())
        hidden.append(o.hidden_states[-1][0].float().clone())
        nxt = int(dl[-1].argmax())
    t = {"ids": torch.cat([ids[0], torch.tensor(toks)]).to(torch.int64), "prefill_logits": prefill_logits,
         "decode_logits": torch.stack(dl), "hidden": torch.cat(hidden, 0)}
    t.update(states)
    meta = {"transformers": transformers.__version__, "torch": torch.__version__, "class": cls.__name__,
            "P": str(P), "N": str(N), "model_seed": "1234", "ids_seed": "99",
            "note": "float32 on CPU; hidden = hidden_states[-1] (after the final norm)"}
    save_file({k: v.contiguous() for k, v in t.items()}, os.path.join(d, "ref.safetensors"), metadata=meta)
    print(f"{name}: {cls.__name__}, layers {getattr(cfg, 'layer_types', None)}, states {sorted(states)}, "
          f"greedy {toks}")


if __name__ == "__main__":
    outdir = sys.argv[1]
    for name, fn in (("qwen3next", qwen3_next), ("qwen35moe", qwen3_5_moe), ("qwen35dense", qwen3_5_dense)):
        try:
            make(name, fn(), outdir)
        except Exception as e:  # report and go on: one config's failure says what to fix
            import traceback
            traceback.print_exc()
            print(f"{name}: FAILED: {e}")
