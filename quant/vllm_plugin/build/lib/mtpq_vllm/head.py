"""The reduced draft head: ids loading and the scatter into the full vocabulary.
Needs no vLLM; the scatter is written against the tensor methods it uses
(new_full, indexing, argmax, to), so it is also tested on a NumPy stand-in
where torch is absent."""
import os

IDS_FILE = "mtp_draft_vocab_ids.pt"


def load_draft_vocab_ids(model_dir: str, expected: int, vocab_size: int):
    """The ascending int64 ids of the draft head from ``model_dir``; checked
    against ``mtp_draft_vocab_size`` and the target vocabulary."""
    import torch

    path = os.path.join(model_dir, IDS_FILE)
    ids = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(ids, torch.Tensor) or ids.dtype != torch.int64 or ids.dim() != 1:
        raise ValueError(f"{path}: expected a 1-D int64 tensor, got {type(ids).__name__}")
    if ids.numel() != expected:
        raise ValueError(f"{path}: {ids.numel()} ids but mtp_draft_vocab_size is {expected}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(f"{path}: ids outside [0, {vocab_size})")
    if ids.numel() > 1 and not bool((ids[1:] > ids[:-1]).all()):
        raise ValueError(f"{path}: ids are not strictly ascending")
    return ids


def scatter_logits(draft_logits, ids, vocab_size: int):
    """[T, n] draft logits -> [T, vocab_size] with -inf outside the draft ids."""
    out = draft_logits.new_full((draft_logits.shape[0], vocab_size), float("-inf"))
    out[:, ids.to(draft_logits.device)] = draft_logits
    return out


def top_tokens(draft_logits, ids):
    """Target ids of the draft argmax (what argmax of the scattered logits gives)."""
    return ids.to(draft_logits.device)[draft_logits.argmax(dim=-1)]
