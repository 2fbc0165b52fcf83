"""Models that read prompts: ``model(prompt)`` predicts at the query, shape ``(B,)``, or, for the causal GPT, at
every point, shape ``(B, n+1)``; ``model.predict(prompt)`` is always the query prediction, in eval mode.

* :mod:`~icl_utils.models.gpt`: the GPT-style transformer (chapters 1, 4, 5);
* :mod:`~icl_utils.models.linear_attention`: linear self-attention, the linear transformer block and the
  gradient-descent models it can express (chapter 5);
* :mod:`~icl_utils.models.feature_attention`: linear attention on a learned feature map, with Oko et al.'s
  two-stage fit (chapters 2, 4).
"""

from icl_utils.models.base import QueryModel, evaluating
from icl_utils.models.feature_attention import (
    FeatureAttention,
    FixedFeatureAttention,
    MLPAttention,
    stage_one_gradients,
    stage_two_fit,
    subspace_fit,
    two_stage_fit,
)
from icl_utils.models.gpt import GPTConfig, ICLTransformer
from icl_utils.models.linear_attention import GD0, LSA, LTB, GDBeta, GDPlusPlus

__all__ = [
    "GD0",
    "LSA",
    "LTB",
    "FeatureAttention",
    "FixedFeatureAttention",
    "GDBeta",
    "GDPlusPlus",
    "GPTConfig",
    "ICLTransformer",
    "MLPAttention",
    "QueryModel",
    "evaluating",
    "stage_one_gradients",
    "stage_two_fit",
    "subspace_fit",
    "two_stage_fit",
]
