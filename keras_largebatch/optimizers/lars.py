"""LARS: layer-wise adaptive rate scaling for large-batch SGD with momentum."""

import keras
from keras import ops

from keras_largebatch._checks import check_bool, check_number
from keras_largebatch.optimizers.base import LayerwiseAdaptiveOptimizer
from keras_largebatch.optimizers.trust_ratio import l2_norm, trust_ratio


@keras.saving.register_keras_serializable(package="keras_largebatch")
class LARS(LayerwiseAdaptiveOptimizer):
    """LARS optimizer (You, Gitman, Ginsburg, 2017) in the MLPerf ResNet-50 form.

    For each variable ``w`` with gradient ``g``:

        trust = trust_coefficient * ||w|| / (||g|| + weight_decay * ||w|| + epsilon)
                # 1 if ||w|| == 0 or ||g|| == 0, or w is excluded from layer adaptation
        trust = min(trust / learning_rate, 1)          # only with clip=True (LARC), where
                                                       # the ratio is defined
        v = momentum * v + learning_rate * trust * (g + weight_decay * w)
        w = w - v                                      # nesterov=True:
        # w = w - (momentum * v + learning_rate * trust * (g + weight_decay * w))

    The decay term is skipped for variables excluded from weight decay. The velocity ``v``
    holds the learning rate, as in the MLPerf reference, so a change of rate takes effect
    through new steps only. The slot stores ``-v``, Keras's SGD convention, so that TensorFlow
    can run the momentum step as one fused kernel.

    Args:
        learning_rate: float, `LearningRateSchedule` or callable. Defaults to ``1.0``
            (MLPerf uses a base rate near 20 at batch 32K with trust_coefficient 0.001).
        momentum: momentum in [0, 1). Defaults to ``0.9`` (0.94-0.95 at batch 32K+).
        trust_coefficient: eta, > 0. Defaults to ``0.001``.
        epsilon: added to the trust-ratio denominator, >= 0. Defaults to ``0.0`` (MLPerf).
        weight_decay: decay rate added to the gradient, >= 0. Defaults to ``0.0``; ``None``
            means 0, as in Keras.
        nesterov: Nesterov momentum. Defaults to ``False``.
        clip: LARC's clip mode, ``trust = min(trust / learning_rate, 1)``, so that the
            local rate never exceeds the global one (NVIDIA apex LARC). Defaults to ``False``.
        exclude_from_weight_decay: ``None`` (default: biases and batch-norm parameters are
            excluded: rank-0/1 variables, and variables named ``bias`` of any rank, such as
            keras-hub's attention biases), a list of regular expressions searched in
            ``variable.path``, or a callable ``variable -> bool``. ``[]`` excludes nothing.
        exclude_from_layer_adaptation: the same kinds of rule for the trust ratio (excluded
            variables use a ratio of 1). ``None`` (default) adapts every variable, as the
            paper's algorithm and optax do; the MLPerf ResNet-50 reference leaves batch-norm
            parameters and biases unadapted (`biases_and_norms`).
        min_trust_ratio: lower clamp on the computed trust ratio (before the LARC clip), or
            ``None`` (default).
        max_trust_ratio: upper clamp on the computed trust ratio (before the LARC clip), or
            ``None`` (default).
        record_trust_ratio: keep the ratio applied to each variable at the last step,
            readable with `trust_ratios()`. Defaults to ``False``.
        clipnorm: as in Keras, applied to the global-batch gradient after the cross-replica
            sum and accumulation (like ``clipvalue`` and ``global_clipnorm``).
        clipvalue: as in Keras, on the global-batch gradient.
        global_clipnorm: as in Keras, on the global-batch gradient.
        gradient_accumulation_steps: int >= 2 or ``None`` (none, as in Keras).
        skip_non_finite_steps: skip an optimizer step whose gradient (summed over replicas,
            with accumulation the sum of its micro-batches) holds an inf or NaN: weights and
            slots keep their values, the accumulators restart, the step count does not
            advance, and the int variable ``skipped_steps`` counts it. Defaults to ``False``.
        name: as in `keras.optimizers.Optimizer`. Defaults to ``"lars"``.
        use_ema: as in `keras.optimizers.Optimizer`.
        ema_momentum: as in `keras.optimizers.Optimizer`.
        ema_overwrite_frequency: as in `keras.optimizers.Optimizer`.
        loss_scale_factor: as in `keras.optimizers.Optimizer`.

    References:
        - You, Gitman, Ginsburg, "Large Batch Training of Convolutional Networks", 2017.
          https://arxiv.org/abs/1708.03888
        - MLPerf training reference, ResNet-50 LARS (tensorflow/tpu `lars_optimizer.py`).
    """

    def __init__(
        self,
        learning_rate=1.0,
        momentum=0.9,
        trust_coefficient=0.001,
        epsilon=0.0,
        weight_decay=0.0,
        nesterov=False,
        clip=False,
        exclude_from_weight_decay=None,
        exclude_from_layer_adaptation=None,
        min_trust_ratio=None,
        max_trust_ratio=None,
        record_trust_ratio=False,
        clipnorm=None,
        clipvalue=None,
        global_clipnorm=None,
        use_ema=False,
        ema_momentum=0.99,
        ema_overwrite_frequency=None,
        loss_scale_factor=None,
        gradient_accumulation_steps=None,
        skip_non_finite_steps=False,
        name="lars",
        **kwargs,
    ):
        check_number("momentum", momentum, low=0.0, high=1.0, high_open=True)
        # A coefficient of 0 would make every adapted variable's step 0: the run would
        # train only the excluded variables, without a word.
        check_number("trust_coefficient", trust_coefficient, low=0.0, low_open=True)
        check_number("epsilon", epsilon, low=0.0)
        check_bool("nesterov", nesterov)
        check_bool("clip", clip)
        super().__init__(
            learning_rate=learning_rate,
            weight_decay=weight_decay,
            exclude_from_weight_decay=exclude_from_weight_decay,
            exclude_from_layer_adaptation=exclude_from_layer_adaptation,
            min_trust_ratio=min_trust_ratio,
            max_trust_ratio=max_trust_ratio,
            record_trust_ratio=record_trust_ratio,
            clipnorm=clipnorm,
            clipvalue=clipvalue,
            global_clipnorm=global_clipnorm,
            use_ema=use_ema,
            ema_momentum=ema_momentum,
            ema_overwrite_frequency=ema_overwrite_frequency,
            loss_scale_factor=loss_scale_factor,
            gradient_accumulation_steps=gradient_accumulation_steps,
            skip_non_finite_steps=skip_non_finite_steps,
            name=name,
            **kwargs,
        )
        self.momentum = momentum
        self.trust_coefficient = trust_coefficient
        self.epsilon = epsilon
        self.nesterov = nesterov
        self.clip = clip

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._velocities = self.add_optimizer_variables(var_list, "velocity")

    @property
    def velocities(self):
        """The momentum buffer of each variable, in the order `build` was given them.

        Each holds ``-v`` of the class docstring, learning rate included, so rescaling it by
        ``new_rate / old_rate`` is Goyal et al.'s momentum correction. Empty before `build`.
        """
        return list(self._velocities) if self.built else []

    def update_step(self, gradient, variable, learning_rate):
        velocity = self._velocities[self._get_variable_index(variable)]
        dtype = variable.dtype
        gradient = ops.cast(gradient, dtype)
        learning_rate = ops.cast(learning_rate, dtype)
        decays = self.decays(variable)

        direction = gradient
        if decays:
            direction = ops.add(
                gradient, ops.multiply(variable, ops.cast(self.weight_decay, dtype))
            )
        if self.adapts(variable):
            weight_norm = l2_norm(variable)
            gradient_norm = l2_norm(gradient)
            denominator = gradient_norm + self.epsilon
            if decays:
                denominator = denominator + self.weight_decay * weight_norm
            ratio = trust_ratio(
                weight_norm,
                gradient_norm,
                trust_coefficient=self.trust_coefficient,
                denominator=denominator,
                min_trust_ratio=self.min_trust_ratio,
                max_trust_ratio=self.max_trust_ratio,
            )
            if self.clip:
                # As in NVIDIA apex's LARC, only a defined ratio is clipped: a variable with a
                # zero norm keeps the fallback of 1 and takes the plain step.
                rate = ops.cast(learning_rate, "float32")
                defined = ops.logical_and(
                    ops.greater(weight_norm, 0.0), ops.greater(gradient_norm, 0.0)
                )
                clipped = ops.minimum(ratio / ops.where(ops.greater(rate, 0.0), rate, 1.0), 1.0)
                ratio = ops.where(ops.logical_and(defined, ops.greater(rate, 0.0)), clipped, ratio)
            self._record_trust_ratio(variable, ratio)
            step_size = ops.multiply(learning_rate, ops.cast(ratio, dtype))
        else:
            step_size = learning_rate

        _momentum_step(self, variable, velocity, direction, step_size, self.momentum, self.nesterov)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "momentum": self.momentum,
                "trust_coefficient": self.trust_coefficient,
                "epsilon": self.epsilon,
                "nesterov": self.nesterov,
                "clip": self.clip,
            }
        )
        return config


def _momentum_step(optimizer, variable, velocity, direction, step_size, momentum, nesterov):
    """``m = momentum * m - step_size * direction``; ``w += m`` (Nesterov:
    ``w += momentum * m - step_size * direction``).

    ``m`` is minus the velocity of the class docstring. On TensorFlow this is one fused kernel.
    """
    if keras.backend.backend() == "tensorflow":
        from keras_largebatch.optimizers import _tensorflow

        _tensorflow.momentum_step(variable, velocity, direction, step_size, momentum, nesterov)
        return
    scaled_direction = ops.multiply(direction, step_size)
    optimizer.assign(velocity, ops.subtract(ops.multiply(velocity, momentum), scaled_direction))
    if nesterov:
        optimizer.assign_add(
            variable, ops.subtract(ops.multiply(velocity, momentum), scaled_direction)
        )
    else:
        optimizer.assign_add(variable, velocity)
