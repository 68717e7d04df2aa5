"""NumPy transcriptions of the LAMB and LARS equations.

LAMB: You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes",
ICLR 2020, arXiv:1904.00962 (Algorithm 2). LARS: You, Gitman, Ginsburg, "Large Batch Training
of Convolutional Networks", arXiv:1708.03888, in the form of the MLPerf ResNet-50 reference
(tensorflow/tpu `lars_optimizer.py`), with NVIDIA apex's LARC clip.

Written from the papers' equations, in float64, one variable at a time, without sharing
any code with the package: the tests compare the optimizers against these.
"""

import numpy as np


def _ratio(numerator, denominator, defined, lower, upper):
    if not defined:
        return 1.0
    ratio = numerator / denominator
    if lower is not None:
        ratio = max(ratio, lower)
    if upper is not None:
        ratio = min(ratio, upper)
    return ratio


def _clip_global(grads, clipnorm):
    norm = np.sqrt(sum(float(np.sum(g * g)) for g in grads))
    if clipnorm is None or norm <= clipnorm:
        return grads
    return [g * (clipnorm / norm) for g in grads]


def lamb(
    weights,
    gradient_steps,
    *,
    lr=1e-3,
    beta_1=0.9,
    beta_2=0.999,
    eps=1e-6,
    wd=0.0,
    bias_correction=True,
    decay_mask=None,
    adapt_mask=None,
    lower=None,
    upper=None,
    global_clipnorm=None,
    lr_at_step=None,
):
    """Run LAMB over ``gradient_steps`` (a list, per step, of one gradient per weight).

    Returns the final weights and, per step, the list of trust ratios.
    """
    w = [np.array(x, np.float64) for x in weights]
    m = [np.zeros_like(x) for x in w]
    v = [np.zeros_like(x) for x in w]
    decay_mask = decay_mask or [True] * len(w)
    adapt_mask = adapt_mask or [True] * len(w)
    ratios = []
    for t, grads in enumerate(gradient_steps, start=1):
        grads = _clip_global([np.array(g, np.float64) for g in grads], global_clipnorm)
        rate = lr if lr_at_step is None else lr_at_step(t - 1)
        step_ratios = []
        for i, g in enumerate(grads):
            m[i] = beta_1 * m[i] + (1 - beta_1) * g
            v[i] = beta_2 * v[i] + (1 - beta_2) * g * g
            if bias_correction:
                m_hat = m[i] / (1 - beta_1**t)
                v_hat = v[i] / (1 - beta_2**t)
            else:
                m_hat, v_hat = m[i], v[i]
            r = m_hat / (np.sqrt(v_hat) + eps)
            u = r + wd * w[i] if decay_mask[i] else r
            w_norm = np.linalg.norm(w[i])
            u_norm = np.linalg.norm(u)
            trust = 1.0
            if adapt_mask[i]:
                trust = _ratio(w_norm, u_norm, w_norm > 0 and u_norm > 0, lower, upper)
            step_ratios.append(trust)
            w[i] = w[i] - rate * trust * u
        ratios.append(step_ratios)
    return w, ratios


def lars(
    weights,
    gradient_steps,
    *,
    lr=1.0,
    momentum=0.9,
    eta=0.001,
    eps=0.0,
    wd=0.0,
    nesterov=False,
    clip=False,
    decay_mask=None,
    adapt_mask=None,
    lower=None,
    upper=None,
    global_clipnorm=None,
    lr_at_step=None,
):
    """Run LARS (MLPerf form, optional Nesterov and LARC clip); same returns as `lamb`.

    The rate of each step enters the velocity with that step's update, so a new rate acts
    through new steps only.
    """
    w = [np.array(x, np.float64) for x in weights]
    velocity = [np.zeros_like(x) for x in w]
    decay_mask = decay_mask or [True] * len(w)
    adapt_mask = adapt_mask or [True] * len(w)
    ratios = []
    for t, grads in enumerate(gradient_steps):
        grads = _clip_global([np.array(g, np.float64) for g in grads], global_clipnorm)
        rate = lr if lr_at_step is None else lr_at_step(t)
        step_ratios = []
        for i, g in enumerate(grads):
            decay = wd if decay_mask[i] else 0.0
            w_norm = np.linalg.norm(w[i])
            g_norm = np.linalg.norm(g)
            trust = 1.0
            if adapt_mask[i]:
                defined = w_norm > 0 and g_norm > 0
                trust = _ratio(eta * w_norm, g_norm + decay * w_norm + eps, defined, lower, upper)
                if clip and defined:
                    trust = min(trust / rate, 1.0)
            step_ratios.append(trust)
            local = rate * trust * (g + decay * w[i])
            velocity[i] = momentum * velocity[i] + local
            if nesterov:
                w[i] = w[i] - (momentum * velocity[i] + local)
            else:
                w[i] = w[i] - velocity[i]
        ratios.append(step_ratios)
    return w, ratios


SHAPES = [(5, 3), (7,), (2, 3, 4), ()]


def make_problem(steps=12, seed=0, shapes=SHAPES, gradient_scale=1.0):
    """Initial weights and per-step gradients for several variable shapes (float32 values)."""
    rng = np.random.default_rng(seed)
    weights = [rng.normal(size=s).astype(np.float32) for s in shapes]
    gradient_steps = [
        [(gradient_scale * rng.normal(size=s)).astype(np.float32) for s in shapes]
        for _ in range(steps)
    ]
    return weights, gradient_steps
