"""Shared code of the executable book *Learning theory of in-context learning*.

One job per module; each imports only the ones above it in this list (``tests/test_layering.py`` checks it):

==========================  ==========================================================================
``config``                  quick/full mode, device, seeds, chunk size, size limits
``declared``                the declared argument checks: ``checked`` and the types it reads (``Count``...)
``prompts``                 ``Prompt`` (context, query), the ``TaskFamily`` protocol, ``squared_errors``
``checks``                  the argument checks every public function uses
``estimators``              prompt-only learners: ``Prompt -> (B,)`` predictions
``tasks/``                  task families, one module each, sampling prompts on the generator's device
``exact``                   closed-form risks and optimal parameters
``models/``                 modules that read prompts (GPT, linear attention, feature attention and its
                            two-stage fit)
``gd``                      full-batch gradient descent over named tensors
``dynamics/``               population objectives that the theory runs gradient descent on
``train``                   ``TrainConfig``, the Adam loop (one step, CUDA graph around it), ensembles
``risk``                    Monte Carlo ICL risk: errors at every prefix, bands, slopes
``plotting``                the house style and every recurring or multi-panel figure
``claims``                  the chapters' claims as data: checked ledgers, their tables and JSON
==========================  ==========================================================================

Every length counts context examples, ``n``, without the query.
"""

from icl_utils.config import by_mode, describe, get_device, is_full, make_generator, mode, seed_everything
from icl_utils.prompts import Prompt

LAYERS = (
    "config",
    "declared",
    "prompts",
    "checks",
    "estimators",
    "tasks",
    "exact",
    "models",
    "gd",
    "dynamics",
    "train",
    "risk",
    "plotting",
    "claims",
)

__all__ = [
    "LAYERS",
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
