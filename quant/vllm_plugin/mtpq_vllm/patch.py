"""Patches for vLLM 0.33.0's Qwen3-Next and Qwen3.5 MTP drafter classes.

What changes, and only when the draft model is a separate repo that carries
its own quantization block (an mtpq -mtpfp8 repo):

1. ``Qwen3NextMultiTokenPredictor`` / ``Qwen3_5MultiTokenPredictor`` are
   built under a copy of the VllmConfig whose ``quant_config`` is the
   drafter's (``get_draft_quant_config`` + ``configure_quant_config``, then
   re-assigned after ``replace`` because VllmConfig's post-init derives the
   target's). ``mtp.fc`` then follows the drafter's ``quantized_layers``
   instead of the ``modelopt_fp4`` override, and the MTP layers get FP8 /
   NVFP4 methods by their ``mtp.*`` prefixes.
2. With ``mtp_draft_vocab_size`` in the drafter config, the predictor gets
   ``draft_lm_head`` (a ReplicatedLinear at prefix ``mtp.draft_lm_head``,
   FP8 through the drafter's config; checkpoint names ``mtp.draft_lm_head.*``
   map to ``model.draft_lm_head.*`` by the class's own ``mtp.``->``model.``
   rename) and the ids of ``mtp_draft_vocab_ids.pt``;
   ``Qwen3NextMTP`` / ``Qwen3_5MTP`` ``compute_logits`` scatter its logits
   into the full vocabulary (``-inf`` elsewhere) and ``get_top_tokens``
   maps the draft argmax to target ids. The target's lm_head, which vLLM
   shares into the drafter, is not used for drafting then.

Embedded MTP (no separate draft model) is left exactly as stock vLLM has it.
"""

import logging

# a child of vLLM's own logger, so its lines show where vLLM's do (vllm serve)
logger = logging.getLogger("vllm.mtpq_vllm")
_APPLIED = False


def separate_drafter(vllm_config) -> bool:
    """True when the draft model is another repo with a quantization block."""
    spec = getattr(vllm_config, "speculative_config", None)
    draft = getattr(spec, "draft_model_config", None) if spec is not None else None
    if draft is None:
        return False
    target = getattr(spec, "target_model_config", None) or vllm_config.model_config
    if draft is target or getattr(draft, "model", None) == getattr(target, "model", None):
        return False
    return getattr(draft, "quantization", None) is not None


def draft_vllm_config(vllm_config, mtp_cls):
    """A VllmConfig whose quant_config is the drafter's, or None."""
    if not separate_drafter(vllm_config):
        return None
    from vllm.config import replace
    from vllm.model_executor.model_loader.utils import configure_quant_config
    from vllm.model_executor.models.utils import get_draft_quant_config

    qc = get_draft_quant_config(vllm_config)
    if qc is None:
        return None
    configure_quant_config(qc, mtp_cls)
    draft = replace(vllm_config, model_config=vllm_config.speculative_config.draft_model_config)
    draft.quant_config = qc  # replace() re-derives the target's; restore the drafter's
    return draft


def _model_dir(model_config) -> str:
    """Local directory of the drafter repo (a path, or the Hub snapshot)."""
    import os

    if os.path.isdir(model_config.model):
        return model_config.model
    from huggingface_hub import hf_hub_download

    from .head import IDS_FILE

    path = hf_hub_download(model_config.model, IDS_FILE, revision=getattr(model_config, "revision", None))
    return os.path.dirname(path)


def _draft_hf_config(vllm_config):
    draft = vllm_config.speculative_config.draft_model_config
    return getattr(draft, "hf_text_config", None) or draft.hf_config


def _patch_predictor(pred_cls, mtp_cls):
    orig_init = pred_cls.__init__

    def __init__(self, *, vllm_config, prefix: str = ""):
        draft = draft_vllm_config(vllm_config, mtp_cls)
        if draft is None:
            orig_init(self, vllm_config=vllm_config, prefix=prefix)
            self.draft_lm_head = None
            return
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.layers.linear import ReplicatedLinear

        with set_current_vllm_config(draft, prefix=prefix):
            orig_init(self, vllm_config=draft, prefix=prefix)
            hf = _draft_hf_config(vllm_config)
            n = getattr(hf, "mtp_draft_vocab_size", None)
            self.draft_lm_head = None
            if n:
                self.draft_lm_head = ReplicatedLinear(
                    hf.hidden_size, int(n), bias=False, quant_config=draft.quant_config,
                    prefix=f"{prefix}.draft_lm_head", return_bias=False,
                )
                self.draft_vocab_size = int(n)
        logger.info("mtpq_vllm: MTP drafter built with the drafter's quantization config (%s)%s",
                    draft.quant_config.get_name() if draft.quant_config else "none",
                    f", reduced FP8 head of {self.draft_vocab_size} ids" if self.draft_lm_head is not None else "")

    __init__.__wrapped__ = orig_init
    pred_cls.__init__ = __init__


def _patch_mtp(mtp_cls):
    from .head import load_draft_vocab_ids, scatter_logits, top_tokens

    orig_init = mtp_cls.__init__
    orig_logits = mtp_cls.compute_logits
    orig_top = getattr(mtp_cls, "get_top_tokens", None)

    def __init__(self, *, vllm_config, prefix: str = ""):
        orig_init(self, vllm_config=vllm_config, prefix=prefix)
        # a buffer from the start, None until the ids load (nn.Module refuses
        # register_buffer over a plain attribute of that name: the first live
        # run in vLLM failed so), moved with the module to its device
        self.register_buffer("_mtpq_ids", None, persistent=False)
        if getattr(self.model, "draft_lm_head", None) is not None:
            draft = vllm_config.speculative_config.draft_model_config
            self._mtpq_ids = load_draft_vocab_ids(_model_dir(draft), self.model.draft_vocab_size,
                                                  self.config.vocab_size)

    def compute_logits(self, hidden_states, spec_step_idx: int = 0):
        if self._mtpq_ids is None:
            return orig_logits(self, hidden_states, spec_step_idx)
        return scatter_logits(self.model.draft_lm_head(hidden_states), self._mtpq_ids, self.config.vocab_size)

    def get_top_tokens(self, hidden_states, *args, **kwargs):
        if self._mtpq_ids is None:
            return orig_top(self, hidden_states, *args, **kwargs)
        return top_tokens(self.model.draft_lm_head(hidden_states), self._mtpq_ids)

    mtp_cls.__init__ = __init__
    mtp_cls.compute_logits = compute_logits
    if orig_top is not None:
        mtp_cls.get_top_tokens = get_top_tokens


def apply() -> None:
    global _APPLIED
    if _APPLIED:
        return
    import vllm

    from . import KNOWN_VLLM

    if getattr(vllm, "__version__", "") not in KNOWN_VLLM:
        logger.warning("mtpq_vllm was written against vLLM %s; this is %s", " and ".join(KNOWN_VLLM),
                       getattr(vllm, "__version__", "?"))
    from vllm.model_executor.models import qwen3_5_mtp, qwen3_next_mtp

    _patch_predictor(qwen3_next_mtp.Qwen3NextMultiTokenPredictor, qwen3_next_mtp.Qwen3NextMTP)
    _patch_predictor(qwen3_5_mtp.Qwen3_5MultiTokenPredictor, qwen3_5_mtp.Qwen3_5MTP)
    _patch_mtp(qwen3_next_mtp.Qwen3NextMTP)
    _patch_mtp(qwen3_5_mtp.Qwen3_5MTP)  # Qwen3_5MoeMTP inherits from it
    _APPLIED = True
