"""The gradient noise scale ``B_simple`` at the weights a run has reached, with an error bar
(McCandlish et al., "An Empirical Model of Large-Batch Training", arXiv:1812.06162).

At fixed weights, ``K`` independent micro-batches of ``b`` examples give gradients ``g_k``.
With ``S`` the mean of ``|g_k|^2`` (batch ``b``) and ``L = |mean_k g_k|^2`` (batch ``K b``),
``E|G_B|^2 = |G|^2 + tr(Sigma) / B`` gives the unbiased estimates (the paper's Appendix A)

```
|G|^2     ~ (K b L - b S) / (K b - b)
tr(Sigma) ~ (S - L) / (1 / b - 1 / (K b))
B_simple  = tr(Sigma) / |G|^2
```

and resampling the ``K`` gradients with replacement gives a bootstrap interval. Unlike
`keras_largebatch.GradientNoiseScale`, which averages the estimates over a stretch of training
(the weights moving under it), this measures one point of the run, so a run gives ``B_simple``
as the loss falls, each value with its own interval.
"""

import numpy as np


def _from_norms(small_norm, big_norm, micro_batch_size, count):
    """``B_simple`` from ``S`` and ``L`` (the module's equations); NaN where the estimate of
    ``|G|^2`` is not positive."""
    small, big = micro_batch_size, count * micro_batch_size
    squared_norm = (big * big_norm - small * small_norm) / (big - small)
    trace = (small_norm - big_norm) / (1 / small - 1 / big)
    return trace / squared_norm if squared_norm > 0 else float("nan")


def estimate(gradients, micro_batch_size):
    """``B_simple`` from ``gradients`` (an array ``(K, parameters)`` of the mean-loss
    gradients of ``K`` micro-batches of ``micro_batch_size`` examples each); NaN where the
    estimate of ``|G|^2`` is not positive."""
    gradients = np.asarray(gradients, dtype=np.float64)
    small_norm = float(np.mean(np.sum(gradients**2, axis=1)))
    big_norm = float(np.sum(np.mean(gradients, axis=0) ** 2))
    return _from_norms(small_norm, big_norm, micro_batch_size, len(gradients))


def pair_estimates(gram, counts, micro_batch_size):
    """``(|G|^2, tr(Sigma))`` estimated from micro-batch gradients drawn ``counts`` times
    each (a bootstrap resample; all ones for the gradients themselves), given their Gram
    matrix ``gram`` (``g_i . g_j``): ``|G|^2`` is the mean of ``g_i . g_j`` over the pairs of
    distinct draws, ``tr(Sigma) = b (S - |G|^2)`` with ``S`` the mean of ``|g_i|^2``. A
    micro-batch drawn twice is no pair of independent ones: its products with itself are
    left out, else they would count its noise as signal and bias ``B_simple`` down by about
    ``B_simple / (K b)``. ``|G|^2`` is 0 when one micro-batch was drawn every time."""
    counts = np.asarray(counts, dtype=np.float64)
    diagonal = np.diag(gram)
    draws = counts.sum()
    small_norm = float(counts @ diagonal) / draws
    pairs = draws**2 - float(counts @ counts)
    products = float(counts @ gram @ counts) - float(counts**2 @ diagonal)
    squared_norm = products / pairs if pairs else 0.0
    return squared_norm, micro_batch_size * (small_norm - squared_norm)


def with_interval(gradients, micro_batch_size, samples, seed, confidence=0.95):
    """``(B_simple, low, high)``: `estimate` and the central ``confidence`` interval of its
    ``samples`` bootstrap resamples of the micro-batch gradients (`pair_estimates` of each;
    NaN resamples dropped)."""
    gradients = np.asarray(gradients, dtype=np.float64)
    count = len(gradients)
    gram = gradients @ gradients.T
    generator = np.random.default_rng(seed)
    resampled = []
    for _ in range(samples):
        counts = np.bincount(generator.integers(0, count, count), minlength=count)
        squared_norm, trace = pair_estimates(gram, counts, micro_batch_size)
        resampled.append(trace / squared_norm if squared_norm > 0 else float("nan"))
    return (estimate(gradients, micro_batch_size), *percentile_interval(resampled, confidence))


def percentile_interval(resampled, confidence=0.95):
    """``(low, high)``: the central ``confidence`` interval of the finite values of
    ``resampled`` (NaN, NaN when none is finite)."""
    resampled = np.asarray(resampled, dtype=np.float64)
    resampled = resampled[np.isfinite(resampled)]
    if not len(resampled):
        return float("nan"), float("nan")
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(resampled, [tail, 100 - tail], method="nearest")
    return float(low), float(high)


class NoiseScaleProbe:
    """Measures ``B_simple`` of ``model`` at its current weights from ``micro_batches``
    micro-batches of ``micro_batch_size`` training examples of ``data`` (drawn without
    replacement), leaving the weights, the optimizer and the run's data order alone."""

    def __init__(self, model, data, micro_batch_size, micro_batches, bootstrap_samples):
        self.model = model
        self.data = data
        self.micro_batch_size = micro_batch_size
        self.micro_batches = micro_batches
        self.bootstrap_samples = bootstrap_samples
        import keras
        import tensorflow as tf

        self._loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        self._gradient = tf.function(self._gradient_and_loss)

    def _gradient_and_loss(self, images, labels):
        import tensorflow as tf

        with tf.GradientTape() as tape:
            loss = self._loss(labels, self.model(images, training=True))
        gradients = tape.gradient(loss, self.model.trainable_variables)
        return tf.concat([tf.reshape(g, [-1]) for g in gradients], axis=0), loss

    def gradients(self, seed):
        """``(gradients, mean loss)``: the ``(micro_batches, parameters)`` array of the
        micro-batch gradients drawn with ``seed``, and their mean training loss."""
        count = self.micro_batches * self.micro_batch_size
        chosen = np.random.default_rng(seed).choice(len(self.data.train_images), count, False)
        gradients, losses = [], []
        for batch in np.split(chosen, self.micro_batches):
            gradient, loss = self._gradient(
                self.data.train_images[batch], self.data.train_labels[batch]
            )
            gradients.append(gradient.numpy())
            losses.append(float(loss))
        return np.stack(gradients), float(np.mean(losses))

    def measure(self, seed):
        """``(training loss, B_simple, low, high)`` at the current weights."""
        gradients, loss = self.gradients(seed)
        value, low, high = with_interval(
            gradients, self.micro_batch_size, self.bootstrap_samples, seed
        )
        return loss, value, low, high
