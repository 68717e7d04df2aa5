"""The optimizer configurations that every distributed comparison runs (TensorFlow strategies,
worker processes and JAX data parallelism), by optimizer name, so that each backend is held to
the same standard. Imports nothing, so a JAX process can read it too.

Two kinds: configurations that adapt every kernel under a clip that binds, blind to a uniform
scale of the gradient, and "lars_sgd_loose_clip", which adapts nothing and whose clip does not
bind, so every variable steps by lr * (g + wd * w) and a gradient 2x too large shows.
"""

CONFIGS = {
    "lamb_plain": ("LAMB", dict(learning_rate=1e-2)),
    "lamb_decay_exclusions": (
        "LAMB",
        dict(
            learning_rate=1e-2,
            weight_decay=0.05,
            exclude_from_weight_decay=["norm", "bias"],
            exclude_from_layer_adaptation=["norm"],
            global_clipnorm=0.5,
        ),
    ),
    "lars_plain": ("LARS", dict(learning_rate=1.0, trust_coefficient=0.02)),
    "lars_decay_nesterov": (
        "LARS",
        dict(
            learning_rate=1.0,
            trust_coefficient=0.02,
            weight_decay=1e-3,
            nesterov=True,
            exclude_from_layer_adaptation=[],
            global_clipnorm=0.5,
        ),
    ),
    # The global gradient norm starts near 10 here: a clip at 50 does not bind (checked below).
    "lars_sgd_loose_clip": (
        "LARS",
        dict(
            learning_rate=0.05,
            weight_decay=1e-3,
            exclude_from_layer_adaptation=[".*"],
            global_clipnorm=50.0,
        ),
    ),
}
