"""Training-time plumbing shared by LAMB and LARS: where gradients are reduced, clipped,
accumulated and applied.

Keras 3's `Optimizer` clips gradients and applies weight decay on each replica's share of
the batch, before the cross-replica sum, and its gradient accumulation calls `merge_call`
inside a `cond`, which `tf.distribute.MirroredStrategy` rejects. A layer-wise trust ratio is
only right on the gradient of the whole global batch, so this base class reorders the step:

1. sum the gradients over replicas (TensorFlow, inside a replica context; the
   TensorFlow-only code is in `_tensorflow.py`);
2. with ``gradient_accumulation_steps = k``: add them to the accumulators and use the mean
   of the k micro-batch gradients;
3. clip (``clipnorm``, ``clipvalue``, ``global_clipnorm``) the global-batch gradient;
4. on an update step, run `update_step` for every variable (weight decay is part of the
   update, inside the trust ratio, never applied separately by the base class).

The learning-rate schedule and the bias correction see the optimizer step count
(`iterations`), which advances once per k micro-batches.

On more than one replica, a step whose summed gradient is not finite (inf or NaN) is
skipped: weights, slots, accumulators, recorded trust ratios and the step count keep their
values on every replica (with ``use_ema``, the moving average still takes its step).
`keras.optimizers.LossScaleOptimizer` makes that decision from replica 0's own gradient
only, so without this check an overflow on another replica would reach the weights of all
of them. The loss scale itself is still LossScaleOptimizer's: it is not halved when only a
replica other than 0 overflowed.

With ``skip_non_finite_steps=True`` a non-finite optimizer step is skipped whole on any
number of replicas and backends: under accumulation the check is made on the accumulated sum
of its micro-batches at the step that would apply it (so a NaN in one micro-batch skips all
of them, and the accumulators restart), the step count does not advance, and the int
variable ``skipped_steps`` counts the skipped steps. On JAX, where both branches of a `cond`
run, each value the update assigns is chosen with `where` as it is assigned.

`measure_gradient_noise_scale` (called by the `keras_largebatch.GradientNoiseScale` callback)
adds to the step the squared norms of a small-batch and a big-batch gradient (see
`noise_scale.py`); until it is called the step computes nothing for it.
"""

import keras
from keras import ops

from keras_largebatch._checks import (
    check_bool,
    check_number,
    check_optional_integer,
    is_number,
    type_error,
)
from keras_largebatch.optimizers import _keras_internals
from keras_largebatch.optimizers.noise_scale import GradientNoiseScaleMeter, squared_norm
from keras_largebatch.optimizers.trust_ratio import ExclusionRule


def _check_learning_rate(learning_rate):
    # A negative or NaN rate would otherwise only show up as a diverged run, and a string
    # (YAML reads "6e-3" as one) as an obscure failure inside the first step.
    if is_number(learning_rate):
        check_number("learning_rate", learning_rate, low=0.0)
    elif isinstance(learning_rate, (str, bool)) or not (
        callable(learning_rate)
        or isinstance(learning_rate, keras.Variable)
        or ops.is_tensor(learning_rate)
    ):
        raise type_error(
            "learning_rate",
            learning_rate,
            "a number >= 0, a LearningRateSchedule, a callable or a variable",
        )


def _check_trust_ratio_bounds(min_trust_ratio, max_trust_ratio):
    if min_trust_ratio is not None:
        check_number("min_trust_ratio", min_trust_ratio, low=0.0)
    if max_trust_ratio is not None:
        check_number("max_trust_ratio", max_trust_ratio, low=0.0, low_open=True)
    if (
        min_trust_ratio is not None
        and max_trust_ratio is not None
        and min_trust_ratio > max_trust_ratio
    ):
        raise ValueError(
            "min_trust_ratio must be <= max_trust_ratio, got "
            f"min_trust_ratio={min_trust_ratio} > max_trust_ratio={max_trust_ratio}"
        )


def _accumulation_steps(steps):
    steps = check_optional_integer("gradient_accumulation_steps", steps)
    # As Keras's optimizers: None is no accumulation, and 1 is refused rather than stored as
    # None, so that the config a user reads back is the one they passed.
    if steps is not None and steps < 2:
        raise ValueError(
            f"gradient_accumulation_steps must be an integer >= 2, or None for no "
            f"accumulation (as in Keras), got {steps}"
        )
    return steps


class LayerwiseAdaptiveOptimizer(keras.optimizers.Optimizer):
    """Base class of `LAMB` and `LARS`; not meant to be used directly.

    Subclasses implement `update_step(gradient, variable, learning_rate)` and read, per
    variable, `decays(variable)`, `adapts(variable)` and call `_record_trust_ratio`.

    Weight decay is excluded only through the constructor's ``exclude_from_weight_decay``:
    the inherited `exclude_from_weight_decay` method is refused (see its docstring).
    """

    def __init__(
        self,
        learning_rate,
        weight_decay,
        exclude_from_weight_decay,
        exclude_from_layer_adaptation,
        min_trust_ratio,
        max_trust_ratio,
        record_trust_ratio,
        clipnorm,
        clipvalue,
        global_clipnorm,
        use_ema,
        ema_momentum,
        ema_overwrite_frequency,
        loss_scale_factor,
        gradient_accumulation_steps,
        name,
        skip_non_finite_steps=False,
        **kwargs,
    ):
        _check_learning_rate(learning_rate)
        # None means no decay everywhere in Keras (`keras.optimizers.Lamb().get_config()`
        # stores it).
        weight_decay = 0.0 if weight_decay is None else weight_decay
        check_bool("skip_non_finite_steps", skip_non_finite_steps)
        check_number("weight_decay", weight_decay, low=0.0)
        _check_trust_ratio_bounds(min_trust_ratio, max_trust_ratio)
        check_bool("record_trust_ratio", record_trust_ratio)
        for argument, value in (
            ("clipnorm", clipnorm),
            ("clipvalue", clipvalue),
            ("global_clipnorm", global_clipnorm),
        ):
            if value is not None:
                check_number(argument, value, low=0.0, low_open=True)
        super().__init__(
            learning_rate=learning_rate,
            weight_decay=weight_decay,
            clipnorm=clipnorm,
            clipvalue=clipvalue,
            global_clipnorm=global_clipnorm,
            use_ema=use_ema,
            ema_momentum=ema_momentum,
            ema_overwrite_frequency=ema_overwrite_frequency,
            loss_scale_factor=loss_scale_factor,
            gradient_accumulation_steps=_accumulation_steps(gradient_accumulation_steps),
            name=name,
            **kwargs,
        )
        self._weight_decay_rule = ExclusionRule(
            exclude_from_weight_decay, "exclude_from_weight_decay"
        )
        # Every variable is adapted unless excluded, as in the papers' algorithms
        # (docs/guides/optimizers.md measures the choice).
        self._layer_adaptation_rule = ExclusionRule(
            exclude_from_layer_adaptation, "exclude_from_layer_adaptation", default=()
        )
        self.min_trust_ratio = min_trust_ratio
        self.max_trust_ratio = max_trust_ratio
        self.record_trust_ratio = record_trust_ratio
        self._noise_scale = None
        self._assign_only_where = None
        self.skip_non_finite_steps = skip_non_finite_steps
        self.skipped_steps = None
        if skip_non_finite_steps:
            # Created beside Keras's step counter (and like it, counted on replica 0 only).
            self.skipped_steps = self.add_variable(
                shape=(),
                initializer="zeros",
                dtype="int",
                aggregation="only_first_replica",
                name="skipped_steps",
            )

    def build(self, variables):
        if self.built:
            return
        super().build(variables)
        # Decided once here, as Python booleans, so the step pays nothing for the rules.
        self._decay_mask = [self._decided_decay(variable) for variable in variables]
        self._adapt_mask = [self._decided_adaptation(variable) for variable in variables]
        self._trust_ratio_records = None
        if self.record_trust_ratio:
            self._trust_ratio_records = [
                self.add_variable(shape=(), initializer="ones", dtype="float32", name="trust_ratio")
                for _ in variables
            ]

    def add_variable_from_reference(self, reference_variable, name=None, initializer="zeros"):
        # Under tf.distribute, each replica accumulates its own micro-batch gradients in its
        # own copy of the accumulator; they are summed once per optimizer step.
        if name == "gradient_accumulator" and keras.backend.backend() == "tensorflow":
            from keras_largebatch.optimizers import _tensorflow

            variable = _tensorflow.replica_local_accumulator(self, reference_variable, name)
            if variable is not None:
                return variable
        return super().add_variable_from_reference(reference_variable, name, initializer)

    def _decided_decay(self, variable):
        return self.weight_decay > 0 and not self._weight_decay_rule.excludes(variable)

    def _decided_adaptation(self, variable):
        return not self._layer_adaptation_rule.excludes(variable)

    def _mask_index(self, variable):
        if not self.built:
            return None
        try:
            return _keras_internals.variable_index(self, variable)
        except KeyError:
            return None

    def decays(self, variable):
        """Whether weight decay applies to ``variable``: ``weight_decay > 0`` and the
        ``exclude_from_weight_decay`` rule does not exclude it.

        Answered before `build` as well, from the same rule the build decides with.
        """
        index = self._mask_index(variable)
        return self._decided_decay(variable) if index is None else self._decay_mask[index]

    def adapts(self, variable):
        """Whether ``variable``'s step is scaled by its trust ratio (else the ratio is 1):
        the ``exclude_from_layer_adaptation`` rule does not exclude it."""
        index = self._mask_index(variable)
        return self._decided_adaptation(variable) if index is None else self._adapt_mask[index]

    def exclude_from_weight_decay(self, var_list=None, var_names=None):
        """Refused: pass the exclusions as the constructor's ``exclude_from_weight_decay``.

        Keras's method keeps its exclusions out of `get_config` (a saved and reloaded
        optimizer would decay them again) and matches ``var_names`` against short names
        only ("gamma", not "layer_norm"); a variable list cannot be saved at all. One
        mechanism that is saved and matches paths is what the rule argument gives.
        """
        raise ValueError(
            f"{self.__class__.__name__}.exclude_from_weight_decay(var_list={var_list!r}, "
            f"var_names={var_names!r}) is not supported: pass the exclusions to the "
            'constructor, e.g. exclude_from_weight_decay=["gamma", "bias"] (regular '
            "expressions searched in variable.path, saved with the optimizer's config) or a "
            "callable variable -> bool"
        )

    def _record_trust_ratio(self, variable, ratio):
        if self._trust_ratio_records is not None:
            index = _keras_internals.variable_index(self, variable)
            self.assign(self._trust_ratio_records[index], ratio)

    def trust_ratios(self):
        """The trust ratio applied to each variable at the last update, by variable path.

        Only available when the optimizer was built with ``record_trust_ratio=True``;
        excluded variables report 1.0.
        """
        if not self.record_trust_ratio:
            raise ValueError(
                f"{self.__class__.__name__} was constructed with record_trust_ratio=False; "
                "pass record_trust_ratio=True to read trust ratios"
            )
        if not self.built:
            return {}
        return {
            variable.path: float(ops.convert_to_numpy(record))
            for variable, record in zip(
                _keras_internals.trainable_variables(self), self._trust_ratio_records
            )
        }

    def measure_gradient_noise_scale(self, batch_size, ema_decay):
        """Start measuring the gradient noise scale at every step; returns True if this call
        started it (a train function traced before must then be traced again).

        ``batch_size`` is the number of examples of one train step over all replicas. The small
        batch is each replica's share of it, ``batch_size / replicas`` (with one replica, the
        micro-batch), the big batch ``batch_size * gradient_accumulation_steps`` (without
        accumulation, all replicas' ``batch_size``). A later call sets new batch sizes and decay
        and keeps the averages. Raises ValueError where there is only one batch size: one
        replica and no gradient accumulation (see `noise_scale.GradientNoiseScaleMeter`).
        """
        started = self._noise_scale is None
        if started:
            self._noise_scale = GradientNoiseScaleMeter(self)
        self._noise_scale.configure(batch_size, ema_decay)
        return started

    def gradient_noise_scale(self):
        """``B_simple = EMA[tr(Sigma)] / EMA[|G|^2]`` in examples, as a float: NaN before the
        first measured step. Needs `measure_gradient_noise_scale` first."""
        if self._noise_scale is None:
            raise ValueError(
                f"{self.__class__.__name__} does not measure the gradient noise scale; call "
                "measure_gradient_noise_scale (the GradientNoiseScale callback does) first"
            )
        return self._noise_scale.value()

    def _variables_to_save(self):
        measured = self._noise_scale.variables if self._noise_scale is not None else []
        return [v for v in self.variables if not any(v is m for m in measured)]

    def save_own_variables(self, store):
        # The noise scale's averages are left out, so a checkpoint has the same layout whether
        # or not a callback measured, and restores into an optimizer that does not measure.
        for i, variable in enumerate(self._variables_to_save()):
            store[str(i)] = variable.numpy()

    def load_own_variables(self, store):
        variables = self._variables_to_save()
        if len(store.keys()) != len(variables):
            super().load_own_variables(store)
            return
        for i, variable in enumerate(variables):
            variable.assign(store[str(i)])

    def _get_current_learning_rate(self):
        # Keras evaluates schedules at the micro-batch counter; under accumulation the
        # schedule must advance once per optimizer step, like the bias correction.
        if isinstance(self._learning_rate, keras.optimizers.schedules.LearningRateSchedule):
            return self._learning_rate(self.iterations)
        return super()._get_current_learning_rate()

    def _apply_weight_decay(self, variables):
        # Weight decay is part of `update_step`, inside the trust ratio. Keras's base class
        # would otherwise shrink the weights a second time, outside it.
        return

    def _backend_apply_gradients(self, grads, trainable_variables):
        grads, finite, micro_step, small_squared_norm = self._reduce(grads)
        if self._noise_scale is not None and small_squared_norm is None:
            small_squared_norm = squared_norm(grads)
        steps = self.gradient_accumulation_steps
        is_update_step = None
        if steps:
            accumulators = [
                self._accumulated_gradients[self._get_variable_index(v)]
                for v in trainable_variables
            ]
            totals = [ops.add(a, ops.cast(g, a.dtype)) for a, g in zip(accumulators, grads)]
            is_update_step = ops.equal((micro_step + 1) % steps, 0)
            summed = totals
            if self._reduce_once():
                from keras_largebatch.optimizers import _tensorflow

                summed = _tensorflow.sum_on_update_step(totals, is_update_step)
            grads = [ops.divide(t, steps) for t in summed]
        step_finite = self._check_step(grads, finite, is_update_step)
        if self._noise_scale is not None:
            self._noise_scale.update(self, small_squared_norm, grads, is_update_step, finite)
        grads = self._clip_gradients(grads)
        learning_rate = self.learning_rate
        if not steps:
            finite = step_finite if step_finite is not None else finite
            if keras.backend.backend() == "jax" and finite is not None:
                self._update_where(finite, grads, trainable_variables, learning_rate)
            else:

                def step(variable, grad, learning_rate, finite):
                    _if_finite(finite, lambda: self.update_step(grad, variable, learning_rate))

                _for_each_variable(
                    self, step, trainable_variables, [grads], shared=(learning_rate, finite)
                )
        elif keras.backend.backend() == "jax":
            self._accumulate_without_branches(
                grads,
                trainable_variables,
                learning_rate,
                totals,
                accumulators,
                is_update_step,
                step_finite,
            )
        else:
            self._accumulate_with_cond(
                grads,
                trainable_variables,
                learning_rate,
                totals,
                accumulators,
                is_update_step,
                finite,
                step_finite,
            )
        if self.use_ema:
            self._update_model_variables_moving_average(self._trainable_variables)
            if self.ema_overwrite_frequency:
                overwrite = ops.equal((self.iterations + 1) % self.ema_overwrite_frequency, 0)
                if keras.backend.backend() == "jax":
                    # JAX runs both branches of a cond, assignments included: choose between
                    # the weights and their averages with `where` instead.
                    for variable, average in zip(
                        self._trainable_variables, self._model_variables_moving_average
                    ):
                        self.assign(variable, ops.where(overwrite, average.value, variable.value))
                else:
                    ops.cond(
                        overwrite,
                        lambda: self._overwrite_model_variables_with_average_value(
                            self._trainable_variables
                        ),
                        lambda: None,
                    )

    def _reduce(self, grads):
        """The global-batch gradients, whether they are finite, the micro-step counter, and
        the small-batch squared norm for the noise scale (None unless measuring on more than
        one replica).

        On TensorFlow each replica holds the gradient of its own share of the batch: the
        gradients are summed over replicas, and ``finite`` says whether that sum holds no inf
        or NaN (None on one replica, where nothing is summed and Keras's `LossScaleOptimizer`
        already checks the gradient every replica applies). JAX's `DataParallel` and a single
        device already produce the global-batch gradient.
        """
        if keras.backend.backend() != "tensorflow":
            # Sparse embedding gradients (JAX's BCOO) are made dense, as on TensorFlow: the
            # second moment, the norms and the clip factor are functions of the summed rows.
            grads = [ops.convert_to_tensor(g, sparse=False) for g in grads]
            return grads, None, self._iterations, None
        from keras_largebatch.optimizers import _tensorflow

        grads = _tensorflow.densify(grads)
        finite = small_squared_norm = None
        context = _tensorflow.multi_replica_context()
        if context is not None and self._noise_scale is not None:
            # Keras scales each replica's loss by 1 / replicas, so replica r holds
            # g_r = G_r / replicas, G_r the mean-loss gradient of its own share of the batch:
            # mean_r |G_r|^2 = replicas * sum_r |g_r|^2. The norm rides in the gradients'
            # all-reduce.
            *grads, summed = context.all_reduce("SUM", list(grads) + [squared_norm(grads)])
            small_squared_norm = summed * context.num_replicas_in_sync
        elif context is not None and self._reduce_once():
            # Each replica accumulates its own share; `sum_on_update_step` sums the totals.
            # Whether a micro-batch is finite on every replica still takes one scalar
            # reduction, unless only whole steps are checked (skip_non_finite_steps).
            if not self.skip_non_finite_steps:
                bad = ops.cast(ops.logical_not(_all_finite(grads)), "float32")
                finite = ops.equal(context.all_reduce("SUM", bad), 0.0)
                self._iterations.assign_sub(
                    ops.cast(ops.logical_not(finite), self._iterations.dtype)
                )
            return grads, finite, _tensorflow.read_after(self._iterations, grads), None
        elif context is not None:
            grads = context.all_reduce("SUM", list(grads))
        if context is not None and not (
            self.skip_non_finite_steps and self.gradient_accumulation_steps
        ):
            # (With skip_non_finite_steps under accumulation, the whole optimizer step is
            # checked instead, on the accumulated sum: see `_check_step`.)
            # LossScaleOptimizer checks replica 0's unreduced gradient; the sum is what every
            # replica applies, so it is the one that must be finite.
            finite = _all_finite(grads)
            # Keras's `apply` adds 1 to the micro-step counter after this method returns.
            self._iterations.assign_sub(ops.cast(ops.logical_not(finite), self._iterations.dtype))
        return grads, finite, _tensorflow.read_after(self._iterations, grads), small_squared_norm

    def _reduce_once(self):
        """Whether the micro-batch gradients stay on their replicas until the update step:
        under tf.distribute with replica-local accumulators, unless the noise scale is
        measured (it reads every micro-batch's sum over replicas)."""
        return (
            bool(self.gradient_accumulation_steps)
            and self._noise_scale is None
            and getattr(self._accumulated_gradients[0], "synchronization", None) == "on_read"
        )

    def _check_step(self, grads, finite, is_update_step):
        """With ``skip_non_finite_steps``: whether the gradient this optimizer step applies
        (the mean of the accumulated micro-batches, summed over replicas) is finite, else
        None. A non-finite step is counted in `skipped_steps` and takes back its place in
        the step counter, so that `iterations` counts the steps applied."""
        if not self.skip_non_finite_steps:
            return None
        steps = self.gradient_accumulation_steps
        if finite is not None and not steps:
            # Already checked on the sum over replicas, and the counter already put back.
            step_finite = finite
            skipped = ops.logical_not(finite)
        else:
            step_finite = _all_finite(grads)
            skipped = ops.logical_not(step_finite)
            if steps:
                skipped = ops.logical_and(skipped, is_update_step)
                if finite is not None:
                    # A micro-batch already skipped on its own adds nothing to count.
                    skipped = ops.logical_and(skipped, finite)
            # Keras's `apply` adds 1 to the micro-step counter after this method returns;
            # a skipped accumulated step starts its k micro-batches again.
            self._iterations.assign_sub(ops.cast(skipped, self._iterations.dtype) * (steps or 1))
        self.skipped_steps.assign_add(ops.cast(skipped, self.skipped_steps.dtype))
        return step_finite

    def _update_where(self, condition, grads, variables, learning_rate):
        # JAX: every value `update_step` assigns is chosen between the new value and the
        # variable's own as it is assigned (see `assign`).
        self._assign_only_where = condition
        try:
            for grad, variable in zip(grads, variables):
                self.update_step(grad, variable, learning_rate)
        finally:
            self._assign_only_where = None

    def _accumulate_with_cond(
        self,
        grads,
        variables,
        learning_rate,
        totals,
        accumulators,
        is_update_step,
        finite,
        step_finite,
    ):
        # The branch is taken per variable, inside the per-device update function, where a
        # `cond` holds no `merge_call`: this is what lets accumulation run under
        # MirroredStrategy.

        def step_or_accumulate(
            variable,
            grad,
            total,
            accumulator,
            learning_rate,
            is_update_step,
            finite,
            step_finite,
        ):
            def update():
                _if_finite(step_finite, lambda: self.update_step(grad, variable, learning_rate))
                self.assign(accumulator, ops.zeros_like(total))

            _if_finite(
                finite,
                lambda: ops.cond(is_update_step, update, lambda: self.assign(accumulator, total)),
            )

        _for_each_variable(
            self,
            step_or_accumulate,
            variables,
            [grads, totals, accumulators],
            shared=(learning_rate, is_update_step, finite, step_finite),
        )

    def _accumulate_without_branches(
        self, grads, variables, learning_rate, totals, accumulators, is_update_step, step_finite
    ):
        # JAX traces both branches of a cond with stateless variables, so the update is
        # computed and each value it assigns is chosen, as it is assigned, between the new
        # value and the variable's own (`assign` below). Choosing only after every update
        # would make XLA keep the old weights and moments alive beside the new ones: the
        # new weights read the new moments while the old ones are still needed.
        condition = is_update_step
        if step_finite is not None:
            condition = ops.logical_and(is_update_step, step_finite)
        self._update_where(condition, grads, variables, learning_rate)
        for accumulator, total in zip(accumulators, totals):
            self.assign(accumulator, ops.where(is_update_step, ops.zeros_like(total), total))

    def assign(self, variable, value):
        condition = getattr(self, "_assign_only_where", None)
        if condition is not None:
            value = ops.where(condition, value, variable.value)
        super().assign(variable, value)

    def assign_add(self, variable, value):
        if getattr(self, "_assign_only_where", None) is not None:
            self.assign(variable, ops.add(variable.value, value))
            return
        super().assign_add(variable, value)

    def assign_sub(self, variable, value):
        if getattr(self, "_assign_only_where", None) is not None:
            self.assign(variable, ops.subtract(variable.value, value))
            return
        super().assign_sub(variable, value)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "exclude_from_weight_decay": self._weight_decay_rule.get_config(),
                "exclude_from_layer_adaptation": self._layer_adaptation_rule.get_config(),
                "min_trust_ratio": self.min_trust_ratio,
                "max_trust_ratio": self.max_trust_ratio,
                "record_trust_ratio": self.record_trust_ratio,
                "skip_non_finite_steps": self.skip_non_finite_steps,
            }
        )
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        for key in ("exclude_from_weight_decay", "exclude_from_layer_adaptation"):
            if key in config:
                config[key] = ExclusionRule.spec_from_config(config[key])
        return super().from_config(config, custom_objects=custom_objects)


def _all_finite(grads):
    """True if no gradient holds an inf or NaN."""
    return ops.all(ops.stack([ops.all(ops.isfinite(g)) for g in grads]))


def _if_finite(finite, update):
    """Run ``update()`` unless ``finite`` is a False tensor; None means no check was needed."""
    if finite is None:
        update()
    else:
        ops.cond(finite, update, lambda: None)


def _for_each_variable(optimizer, fn, variables, columns, shared=()):
    """Run ``fn(variable, *[column[i] for column in columns], *shared)`` for each variable.

    ``columns`` are per-variable lists (gradients, accumulator totals, ...), ``shared`` the
    values every call sees (learning rate, update-step flag). On TensorFlow each call runs
    once per device, on that device's copy of the variable.
    """
    if keras.backend.backend() == "tensorflow":
        from keras_largebatch.optimizers import _tensorflow

        _tensorflow.update_per_device(optimizer, fn, variables, columns, shared)
        return
    for i, variable in enumerate(variables):
        fn(variable, *[column[i] for column in columns], *shared)
