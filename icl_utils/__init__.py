"""Shared code of the executable book *Learning theory of in-context learning*.

Modules: :mod:`~icl_utils.config` (mode, device, seeds), :mod:`~icl_utils.prompts` (the Prompt every sampler
returns), :mod:`~icl_utils.tasks` (task families), :mod:`~icl_utils.estimators` (prompt-only baselines),
:mod:`~icl_utils.models` (transformers), :mod:`~icl_utils.train` (the training loop), :mod:`~icl_utils.risk`
(ICL risk on sampled prompts) and :mod:`~icl_utils.plotting` (the house style).
"""

from icl_utils.config import by_mode, describe, get_device, is_full, make_generator, mode, seed_everything
from icl_utils.prompts import Prompt

__all__ = [
    "Prompt",
    "by_mode",
    "describe",
    "get_device",
    "is_full",
    "make_generator",
    "mode",
    "seed_everything",
]
__version__ = "0.1.0"
