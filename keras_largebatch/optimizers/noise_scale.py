"""The gradient noise scale, measured inside the optimizer step from gradients it already has.

McCandlish et al., "An Empirical Model of Large-Batch Training" (arXiv:1812.06162),
Appendix A. The mean-loss gradient ``G_B`` over ``B`` examples has

    E|G_B|^2 = |G|^2 + tr(Sigma) / B

(``G`` the true gradient, ``Sigma`` the covariance of per-example gradients), so the squared
norms ``S`` of gradients over ``B_small`` examples and ``L`` of one over ``B_big`` examples give
the unbiased estimates

    |G|^2     ~ (B_big * L - B_small * S) / (B_big - B_small)
    tr(Sigma) ~ (S - L) / (1 / B_small - 1 / B_big)

Each is averaged by an exponential moving average, and the simple noise scale is the ratio of
the averages, ``B_simple = EMA[tr(Sigma)] / EMA[|G|^2]`` (the ratio of two unbiased estimates
is biased, the ratio of their averages much less). Both averages start at 0 and share the
decay, so their start-up bias ``1 - decay**t`` cancels in the ratio.

The optimizer hands `GradientNoiseScaleMeter.update` the small-batch squared norm (the mean
over replicas of the squared norm of each replica's gradient, or the micro-batch gradient's)
and the big-batch gradient (the global or the accumulated one). The update is scalar
`keras.ops` kept or dropped with `where` (a `cond` only where TensorFlow allows one), so it runs
on every backend, under `tf.function`, XLA, `MirroredStrategy` and JAX's stateless step.
"""

import contextlib

import keras
from keras import ops

from keras_largebatch._checks import check_integer, check_number


def squared_norm(gradients):
    """``sum_i |g_i|^2`` over a list of gradients, accumulated in float32."""
    gradients = [ops.cast(g, "float32") for g in gradients]
    if keras.backend.backend() == "tensorflow":
        from keras_largebatch.optimizers import _tensorflow

        return _tensorflow.squared_norm(gradients)
    return ops.sum(ops.stack([ops.sum(ops.square(g)) for g in gradients]))


def _keep_unless(flag, optimizer, variable, value):
    """Assign ``value`` where ``flag`` holds, else keep the variable (None: always assign)."""
    if flag is not None:
        value = ops.where(flag, value, variable.value)
    optimizer.assign(variable, value)


def _branches_run_alone():
    """Whether a `cond` may hold the averages' assignments and run only its taken branch:
    TensorFlow outside a multi-replica context. In one, an assignment's `merge_call` is
    refused inside a `cond`; JAX traces both branches, assignments included."""
    if keras.backend.backend() != "tensorflow":
        return False
    from keras_largebatch.optimizers import _tensorflow

    return _tensorflow.multi_replica_context() is None


def _both(first, second):
    if first is None or second is None:
        return second if first is None else first
    return ops.logical_and(first, second)


class GradientNoiseScaleMeter:
    """The optimizer variables of the measurement and their update at each step.

    Created by `LayerwiseAdaptiveOptimizer.measure_gradient_noise_scale`. ``replicas`` is the
    number of replicas whose gradients the optimizer sums (1 where the gradient arrives
    global, as under JAX's `DataParallel`), ``accumulation_steps`` the micro-batches per
    update (1 without accumulation); with neither above 1 there is one batch size only, and
    the constructor raises ValueError.
    """

    def __init__(self, optimizer):
        replicas = 1
        scope = contextlib.nullcontext()
        if keras.backend.backend() == "tensorflow":
            from keras_largebatch.optimizers import _tensorflow

            replicas = _tensorflow.num_replicas(optimizer)
            scope = _tensorflow.variable_scope(optimizer)
        accumulation_steps = optimizer.gradient_accumulation_steps or 1
        if replicas == 1 and accumulation_steps == 1:
            raise ValueError(
                "the gradient noise scale needs gradients of two batch sizes: train under a "
                "tf.distribute strategy with 2 or more replicas, or pass "
                "gradient_accumulation_steps >= 2 to the optimizer; got 1 replica and "
                f"gradient_accumulation_steps={optimizer.gradient_accumulation_steps}"
            )
        self.replicas = replicas
        self.accumulation_steps = accumulation_steps
        with scope:

            def scalar(name, initializer="zeros"):
                # Every replica assigns the same value (computed from all-reduced norms).
                return optimizer.add_variable(
                    shape=(),
                    initializer=initializer,
                    dtype="float32",
                    aggregation="only_first_replica",
                    name=f"gradient_noise_scale_{name}",
                )

            self.small_batch_size = scalar("small_batch_size", "ones")
            self.big_batch_size = scalar("big_batch_size", "ones")
            self.ema_decay = scalar("ema_decay")
            self.squared_norm_average = scalar("squared_norm_average")
            self.trace_average = scalar("trace_average")
            self.small_squared_norm_total = None
            if accumulation_steps > 1:
                self.small_squared_norm_total = scalar("small_squared_norm_total")

    @property
    def variables(self):
        return [
            v
            for v in (
                self.small_batch_size,
                self.big_batch_size,
                self.ema_decay,
                self.squared_norm_average,
                self.trace_average,
                self.small_squared_norm_total,
            )
            if v is not None
        ]

    def configure(self, batch_size, ema_decay):
        """Set the batch sizes from ``batch_size``, the examples of one train step over all
        replicas, and the decay of the averages."""
        check_integer("batch_size", batch_size, low=self.replicas)
        check_number("ema_decay", ema_decay, low=0.0, high=1.0, high_open=True)
        if batch_size % self.replicas:
            raise ValueError(
                f"batch_size must be a multiple of the {self.replicas} replicas, got {batch_size}"
            )
        self.small_batch_size.assign(batch_size // self.replicas)
        self.big_batch_size.assign(batch_size * self.accumulation_steps)
        self.ema_decay.assign(ema_decay)

    def update(self, optimizer, small_squared_norm, big_gradients, is_update_step, finite):
        """One micro-step. ``small_squared_norm`` is its S; ``big_gradients`` the gradient
        over ``B_big`` examples (under accumulation, complete only where ``is_update_step``;
        ``is_update_step`` is None without accumulation). Nothing changes where ``finite`` is
        a False tensor."""
        if self.small_squared_norm_total is None:
            self._update_averages(optimizer, small_squared_norm, big_gradients, finite)
            return
        total = self.small_squared_norm_total + small_squared_norm
        _keep_unless(
            finite,
            optimizer,
            self.small_squared_norm_total,
            ops.where(is_update_step, ops.zeros_like(total), total),
        )
        small_squared_norm = total / self.accumulation_steps
        if _branches_run_alone():
            # The micro-steps between updates skip the big-batch norm (on one TensorFlow
            # replica, where a step is short, it is most of the measurement's cost).
            ops.cond(
                is_update_step,
                lambda: self._update_averages(optimizer, small_squared_norm, big_gradients, finite),
                lambda: None,
            )
        else:
            self._update_averages(
                optimizer, small_squared_norm, big_gradients, _both(is_update_step, finite)
            )

    def _update_averages(self, optimizer, small_squared_norm, big_gradients, take_step):
        big_squared_norm = squared_norm(big_gradients)
        small_batch, big_batch = self.small_batch_size.value, self.big_batch_size.value
        squared_norm_estimate = (
            big_batch * big_squared_norm - small_batch * small_squared_norm
        ) / (big_batch - small_batch)
        trace_estimate = (small_squared_norm - big_squared_norm) / (1 / small_batch - 1 / big_batch)
        decay = self.ema_decay.value
        for average, estimate in (
            (self.squared_norm_average, squared_norm_estimate),
            (self.trace_average, trace_estimate),
        ):
            _keep_unless(
                take_step, optimizer, average, decay * average.value + (1 - decay) * estimate
            )

    def value(self):
        """``B_simple``, in examples: NaN before the first measured step."""
        squared_norm_average = float(ops.convert_to_numpy(self.squared_norm_average))
        trace_average = float(ops.convert_to_numpy(self.trace_average))
        if squared_norm_average == 0.0:
            return float("nan")
        return trace_average / squared_norm_average
