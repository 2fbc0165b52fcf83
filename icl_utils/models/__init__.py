"""Models that read prompts."""

from icl_utils.models.gpt import GPTConfig, ICLTransformer

__all__ = ["GPTConfig", "ICLTransformer"]
