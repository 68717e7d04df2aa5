"""LAMB: layer-wise adaptive moments for large-batch training."""

import warnings

import keras
from keras import ops

from keras_largebatch._checks import check_bool, check_number
from keras_largebatch.optimizers.base import LayerwiseAdaptiveOptimizer
from keras_largebatch.optimizers.trust_ratio import l2_norm, trust_ratio

# Variable dtypes whose moments are kept in float32.
LOW_PRECISION = ("float16", "bfloat16")


@keras.saving.register_keras_serializable(package="keras_largebatch")
class LAMB(LayerwiseAdaptiveOptimizer):
    """LAMB optimizer (You et al., 2020), with weight decay inside the trust ratio.

    For each variable ``w`` with gradient ``g`` at step ``t`` (1-based):

        m = beta_1 * m + (1 - beta_1) * g
        v = beta_2 * v + (1 - beta_2) * g**2
        m_hat = m / (1 - beta_1**t)           # without bias_correction: m_hat = m
        v_hat = v / (1 - beta_2**t)           # without bias_correction: v_hat = v
        r = m_hat / (sqrt(v_hat) + epsilon)
        u = r + weight_decay * w              # decay skipped for excluded variables
        trust = ||w|| / ||u||                 # 1 if either norm is 0 or w is excluded
        w = w - learning_rate * trust * u

    Unlike `keras.optimizers.Lamb`, the weight decay is part of ``u``: it is scaled by the
    trust ratio and counted in ``||u||``, as in the paper and in the BERT reference code.

    Args:
        learning_rate: float, `LearningRateSchedule` or callable. Defaults to ``1e-3``.
        beta_1: exponential decay of the first moment, in [0, 1). Defaults to ``0.9``.
        beta_2: exponential decay of the second moment, in [0, 1). Defaults to ``0.999``.
        epsilon: added to ``sqrt(v_hat)`` (outside the square root), >= 0. Defaults to
            ``1e-6``, the paper's and BERT's value (Keras's `Lamb` uses 1e-7).
        weight_decay: decoupled decay rate added inside the update, >= 0. Defaults to
            ``0.0``; BERT pretraining uses ``0.01``; ``None`` means 0, as in Keras. With a
            zero gradient the update is ``weight_decay * w`` and its trust ratio
            ``1 / weight_decay``, so an unused variable shrinks by ``learning_rate * w`` per
            step whatever the decay: exclude it or bound the ratio (``max_trust_ratio``).
        bias_correction: divide the moments by ``1 - beta**t``. Defaults to ``True``; the
            google-research/bert optimizer runs without it.
        exclude_from_weight_decay: ``None`` (default: biases and normalization parameters are
            excluded: rank-0/1 variables, and variables named ``bias`` of any rank, such as
            keras-hub's attention biases), a list of regular expressions searched in
            ``variable.path``, or a callable ``variable -> bool``. ``[]`` excludes nothing.
        exclude_from_layer_adaptation: the same kinds of rule for the trust ratio
            (excluded variables use a ratio of 1). ``None`` (default) adapts every variable,
            as the paper's algorithm, Keras's `Lamb`, optax and timm do;
            google-research/bert leaves LayerNorm and biases unadapted
            (``["layer_norm", "bias"]``, or `biases_and_norms`).
        min_trust_ratio: lower clamp on the trust ratio, or ``None`` (default).
        max_trust_ratio: upper clamp on the trust ratio, or ``None`` (default). The paper's
            theory clips the ratio; DeepSpeed exposes both bounds, timm clamps at 1.
        record_trust_ratio: keep the ratio applied to each variable at the last step,
            readable with `trust_ratios()`. Defaults to ``False`` (no cost).
        clipnorm: as in Keras, but applied to the gradient of the global batch, after the
            cross-replica sum and after accumulation (like ``clipvalue`` and
            ``global_clipnorm``).
        clipvalue: as in Keras, on the global-batch gradient.
        global_clipnorm: as in Keras, on the global-batch gradient. ``global_clipnorm=1.0`` is
            NVIDIA's NVLAMB pre-normalization.
        gradient_accumulation_steps: int >= 2, or ``None`` for none (as in Keras); update
            every k micro-batches with their mean gradient. Works under `tf.distribute` strategies.
        skip_non_finite_steps: skip an optimizer step whose gradient (summed over replicas,
            with accumulation the sum of its micro-batches) holds an inf or NaN: weights and
            slots keep their values, the accumulators restart, the step count does not
            advance, and the int variable ``skipped_steps`` counts it. Defaults to ``False``.
        name: as in `keras.optimizers.Optimizer`. Defaults to ``"lamb"``.
        use_ema: as in `keras.optimizers.Optimizer`.
        ema_momentum: as in `keras.optimizers.Optimizer`.
        ema_overwrite_frequency: as in `keras.optimizers.Optimizer`.
        loss_scale_factor: as in `keras.optimizers.Optimizer`.

    References:
        - You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76
          minutes", ICLR 2020. https://arxiv.org/abs/1904.00962
    """

    def __init__(
        self,
        learning_rate=1e-3,
        beta_1=0.9,
        beta_2=0.999,
        epsilon=1e-6,
        weight_decay=0.0,
        bias_correction=True,
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
        name="lamb",
        **kwargs,
    ):
        check_number("beta_1", beta_1, low=0.0, high=1.0, high_open=True)
        check_number("beta_2", beta_2, low=0.0, high=1.0, high_open=True)
        check_number("epsilon", epsilon, low=0.0)
        check_bool("bias_correction", bias_correction)
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
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.bias_correction = bias_correction

    def build(self, var_list):
        if self.built:
            return
        super().build(var_list)
        self._momentums, self._velocities = self.add_optimizer_variables(
            var_list, ["momentum", "velocity"]
        )

    def add_variable_from_reference(self, reference_variable, name=None, initializer="zeros"):
        """Slots like the variable, except that those of float16 and bfloat16 variables are
        float32: in bfloat16, ``beta_2 = 0.999`` rounds to 1 and a second moment moves by less
        than its precision each step; in float16, ``(1 - beta_2) * g**2`` underflows for
        ``|g| < 8e-3``. Each slot takes its variable's layout, as Keras's own slots do: under
        `keras.distribution.ModelParallel` it is split over the devices like its variable,
        not held whole by each of them."""
        if keras.backend.standardize_dtype(reference_variable.dtype) not in LOW_PRECISION:
            return super().add_variable_from_reference(reference_variable, name, initializer)
        return self.add_variable(
            shape=reference_variable.shape,
            initializer=initializer,
            dtype="float32",
            # A slot's path ("lamb/dense_kernel_momentum") rarely matches a LayoutMap key:
            # without the variable's layout, the distribution would replicate the slot.
            layout=getattr(reference_variable, "_layout", None),
            # Keras's name for a slot of this variable.
            name=f"{reference_variable.path.replace('/', '_')}_{name or 'var'}",
        )

    def update_step(self, gradient, variable, learning_rate):
        index = self._get_variable_index(variable)
        m = self._momentums[index]
        v = self._velocities[index]
        # The slots' dtype: the variable's, or float32 for a float16 or bfloat16 variable,
        # whose step is then computed in float32 and rounded once, when it is applied.
        dtype = m.dtype
        gradient = ops.cast(gradient, dtype)
        learning_rate = ops.cast(learning_rate, dtype)
        weights = variable if dtype == variable.dtype else ops.cast(variable, dtype)

        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1.0 - self.beta_1))
        self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), 1.0 - self.beta_2))
        if self.bias_correction:
            # The corrections fold into two scalars: r = m * c1 / (sqrt(v) * c2 + eps).
            step = ops.cast(self.iterations + 1, dtype)
            inverse_correction_1 = 1.0 / (1.0 - ops.power(ops.cast(self.beta_1, dtype), step))
            inverse_sqrt_correction_2 = ops.rsqrt(
                1.0 - ops.power(ops.cast(self.beta_2, dtype), step)
            )
            update = ops.divide(
                ops.multiply(m, inverse_correction_1),
                ops.add(ops.multiply(ops.sqrt(v), inverse_sqrt_correction_2), self.epsilon),
            )
        else:
            update = ops.divide(m, ops.add(ops.sqrt(v), self.epsilon))
        if self.decays(variable):
            update = ops.add(update, ops.multiply(weights, ops.cast(self.weight_decay, dtype)))

        if self.adapts(variable):
            ratio = trust_ratio(
                l2_norm(weights),
                l2_norm(update),
                min_trust_ratio=self.min_trust_ratio,
                max_trust_ratio=self.max_trust_ratio,
            )
            self._record_trust_ratio(variable, ratio)
            step_size = ops.multiply(learning_rate, ops.cast(ratio, dtype))
        else:
            step_size = learning_rate
        self.assign_sub(variable, ops.cast(ops.multiply(update, step_size), variable.dtype))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "beta_1": self.beta_1,
                "beta_2": self.beta_2,
                "epsilon": self.epsilon,
                "bias_correction": self.bias_correction,
            }
        )
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """Also reads a `keras.optimizers.Lamb` config (one without this class's
        ``bias_correction`` and ``exclude_from_layer_adaptation``), keeping its epsilon and
        rate: every variable is then adapted and (with ``weight_decay``) decayed, as Keras's
        `Lamb` does. A warning says once what still differs.
        """
        if not any(key in config for key in _OWN_CONFIG_KEYS):
            config = {
                **config,
                "exclude_from_weight_decay": [],
                "exclude_from_layer_adaptation": [],
            }
            warnings.warn(
                "LAMB.from_config read a keras.optimizers.Lamb config: every variable is "
                "adapted and decayed as in Keras's Lamb (exclude_from_weight_decay=[], "
                "exclude_from_layer_adaptation=[]) and its epsilon "
                f"{config.get('epsilon')} is kept; the weight decay, if any, is applied "
                "inside the trust ratio, where Keras's Lamb shrinks w by lr * weight_decay * w "
                "outside it",
                stacklevel=2,
            )
        return super().from_config(config, custom_objects=custom_objects)


# Keys a LAMB config always holds and a `keras.optimizers.Lamb` config never does.
_OWN_CONFIG_KEYS = ("bias_correction", "exclude_from_layer_adaptation")
