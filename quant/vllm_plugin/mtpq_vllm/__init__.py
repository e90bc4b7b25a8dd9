"""vLLM plugin for mtpq drafter repos (vLLM 0.33.0; also 0.34.0 and 0.26.0).

Stock vLLM builds a Qwen3-Next / Qwen3.5 MTP drafter with the *target's*
quantization config, so a separate drafter repo's FP8/NVFP4 layers do not
load, and no MTP class loads a reduced-vocabulary draft head. This plugin,
registered through the ``vllm.general_plugins`` entry point, changes that
without editing site-packages:

* when the speculative draft model is a different repo with its own
  quantization block, the MTP predictor (``mtp.fc`` and the MTP layers) is
  built with the drafter's quantization config (the pattern of vLLM's
  ``Qwen4ExpMTP._make_draft_vllm_config``);
* when the drafter's config has ``mtp_draft_vocab_size``, the MTP model gets
  ``mtp.draft_lm_head`` (FP8 per tensor through the drafter's config) and the
  ids of ``mtp_draft_vocab_ids.pt``; draft logits are scattered back into
  the full vocabulary with ``-inf`` elsewhere, and the local-argmax path
  maps the draft argmax to target ids.
"""

PINNED_VLLM = "0.33.0"
# the releases whose hooks the plugin was checked against: 0.33.0 and 0.34.0
# (the newest) from their source (tests/interop/test_vllm_plugin.py,
# MTPQ_VLLM_VERSION for another than the pinned one), 0.26.0 (the newest
# release that pins torch 2.11) run live (tests/vllm_live)
KNOWN_VLLM = ("0.26.0", "0.33.0", "0.34.0")


def register() -> None:
    """Entry point called by vLLM in every process."""
    from . import patch

    patch.apply()
