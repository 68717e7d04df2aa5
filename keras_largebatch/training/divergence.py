"""The divergence guard: decides, at the end of each logging window, whether the run diverged.

A window diverged when its mean training loss is not finite, or, with
``divergence.max_loss_ratio`` set, when it is above that ratio times the mean loss of the
``divergence.recent_windows`` finite windows before it (a loss spike). Before a checkpoint is
written the model's and the optimizer's variables are checked too (`non_finite_variables`): a
step can make the weights non-finite after the window's last loss was computed.

The decision depends only on the window losses, which every replica, worker and process of a
run reports alike (Keras reduces the loss over the global batch), so all take the same one.
The recent losses travel in each checkpoint's state, so a resumed run measures spikes against
the same windows as an uninterrupted one, and decides the same.

What follows a divergence is the trainer's: with ``divergence.action=stop`` the run ends with
`TrainingDiverged`; with ``rollback`` it restores the newest checkpoint of the phase and skips
the input past the window that diverged (PaLM's recipe for loss spikes: "PaLM: Scaling Language
Modeling with Pathways", arXiv:2204.02311, section 5.1).
"""

import math

import keras
import numpy as np


class TrainingDiverged(RuntimeError):
    """The run diverged and stopped; its message names the phase, the step, the value and the
    last good checkpoint, and the run's summary records it under ``diverged``."""


class DivergenceGuard:
    """Judges window losses against ``config`` (a `config.DivergenceConfig`).

    Args:
        config: the run's divergence settings.
        recent_losses: the finite window losses before the first window judged (what `state`
            returned at the checkpoint a resumed run starts from).
    """

    def __init__(self, config, recent_losses=()):
        self.config = config
        self.recent_losses = list(recent_losses)[-config.recent_windows :]

    def check(self, loss):
        """Why a window whose mean loss is ``loss`` diverged, or None when it did not (its loss
        then joins the recent ones)."""
        if not math.isfinite(loss):
            return f"loss {loss}"
        ratio = self.config.max_loss_ratio
        if ratio is not None and self.recent_losses:
            mean = float(np.mean(self.recent_losses))
            if loss > ratio * mean:
                return (
                    f"loss {loss:.6g} is above divergence.max_loss_ratio={ratio:g} x the mean "
                    f"{mean:.6g} of the {len(self.recent_losses)} window(s) before"
                )
        self.recent_losses = (self.recent_losses + [loss])[-self.config.recent_windows :]
        return None

    def roll_back(self, recent_losses):
        """Forgets the windows after the checkpoint restored (``recent_losses``: its state's)."""
        self.recent_losses = list(recent_losses)[-self.config.recent_windows :]

    def state(self):
        """What a checkpoint keeps of the guard."""
        return {"recent_losses": list(self.recent_losses)}


def non_finite_variables(variables):
    """The paths of the floating-point ``variables`` holding a NaN or an infinity, checked on
    their devices (only one boolean per variable comes back). Every process of a run calls it
    at the same point and gets the same answer: on JAX each check spans the variable's shards
    on every process."""
    floating = [variable for variable in variables if keras.backend.is_float_dtype(variable.dtype)]
    if not floating:
        return []
    finite = host_value(_all_finite([variable.value for variable in floating]))
    return [variable.path for variable, ok in zip(floating, finite) if not ok]


_jax_all_finite = None


def _all_finite(values):
    """A vector of one boolean per tensor of ``values``: whether all its elements are finite.
    On JAX one compiled program checks them all; checked one by one, each shape would compile
    two programs of its own (80 in a process that trains a toy model, a tiny BERT and a small
    ResNet)."""
    if keras.backend.backend() != "jax":
        return keras.ops.stack([keras.ops.all(keras.ops.isfinite(value)) for value in values])
    global _jax_all_finite
    if _jax_all_finite is None:
        import jax
        import jax.numpy as jnp

        _jax_all_finite = jax.jit(
            lambda values: jnp.stack([jnp.all(jnp.isfinite(value)) for value in values])
        )
    return _jax_all_finite(values)


def host_value(value):
    """A tensor, or a variable, as NumPy in this process; a JAX array replicated over several
    processes' devices (a reduction's result, a replicated variable) is read from this
    process's copy."""
    if isinstance(value, keras.Variable):
        # Read as a tensor: NumPy cannot take a TensorFlow MirroredVariable of integers directly.
        value = keras.ops.convert_to_tensor(value)
    if getattr(value, "is_fully_addressable", True) is False:
        value = value.addressable_data(0)
    return keras.ops.convert_to_numpy(value)
