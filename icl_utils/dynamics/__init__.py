"""Population objectives and the gradient descent that the theory analyses on them, run with
:func:`icl_utils.gd.gradient_descent`: the mean-field two-timescale objective of chapter 3
(:mod:`~icl_utils.dynamics.mean_field`), the exact risk of GD-beta of chapter 5
(:mod:`~icl_utils.dynamics.gd_beta`) and softmax attention on orthonormal features of chapter 6
(:mod:`~icl_utils.dynamics.softmax_attention`)."""
