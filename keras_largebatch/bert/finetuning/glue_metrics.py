"""GLUE's metrics in NumPy, and `score`, which gives a task the metrics GLUE scores it with.

Wang et al., "GLUE: A Multi-Task Benchmark and Analysis Platform for Natural Language
Understanding" (arXiv 1804.07461), Table 1: Matthews correlation for CoLA; F1 and accuracy for
MRPC and QQP; Pearson and Spearman correlation for STS-B; accuracy for the others. The
definitions follow scikit-learn's (``accuracy_score``, ``f1_score``, ``matthews_corrcoef``) and
SciPy's (``pearsonr``, ``spearmanr``), with one convention for a correlation that is undefined
because one side is constant: it is 0, as scikit-learn's Matthews correlation returns (SciPy's
correlations return NaN there, which no best-checkpoint comparison could order).
"""

import numpy as np

from keras_largebatch.bert.finetuning import glue


def accuracy(labels, predictions):
    """The fraction of predictions equal to their label."""
    return float(np.mean(np.asarray(labels) == np.asarray(predictions)))


def f1(labels, predictions):
    """F1 of the positive class (id 1): ``2 TP / (2 TP + FP + FN)``.

    The harmonic mean of precision ``TP / (TP + FP)`` and recall ``TP / (TP + FN)``; 0 when
    there is no positive label and no positive prediction (scikit-learn's ``zero_division``).
    """
    labels = np.asarray(labels) == 1
    predictions = np.asarray(predictions) == 1
    true_positives = np.sum(labels & predictions)
    wrong = np.sum(labels != predictions)
    denominator = 2 * true_positives + wrong
    return float(2 * true_positives / denominator) if denominator else 0.0


def matthews_correlation(labels, predictions):
    """Matthews correlation coefficient, for any number of classes.

    With ``t_k`` the number of labels of class k, ``p_k`` the number of predictions of class k,
    ``c`` the number of correct predictions and ``s`` the number of examples (Gorodkin,
    "Comparing two K-category assignments by a K-category correlation coefficient", 2004)::

        MCC = (c s - sum_k p_k t_k) / sqrt((s^2 - sum_k p_k^2) (s^2 - sum_k t_k^2))

    which for two classes is ``(TP TN - FP FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN))``.
    0 when the denominator is (all labels, or all predictions, of one class).
    """
    labels = np.asarray(labels)
    predictions = np.asarray(predictions)
    classes, indices = np.unique(np.concatenate([labels, predictions]), return_inverse=True)
    label_counts = np.bincount(indices[: len(labels)], minlength=len(classes)).astype(np.float64)
    prediction_counts = np.bincount(indices[len(labels) :], minlength=len(classes)).astype(
        np.float64
    )
    correct = float(np.sum(labels == predictions))
    total = float(len(labels))
    covariance = correct * total - prediction_counts @ label_counts
    variance_predictions = total**2 - prediction_counts @ prediction_counts
    variance_labels = total**2 - label_counts @ label_counts
    denominator = np.sqrt(variance_predictions * variance_labels)
    return float(covariance / denominator) if denominator else 0.0


def pearson(labels, predictions):
    """Pearson's correlation ``sum (x - mean x)(y - mean y) / sqrt(sum (x - mean x)^2 sum (y -
    mean y)^2)``; 0 when either side is constant."""
    x = np.asarray(labels, dtype=np.float64)
    y = np.asarray(predictions, dtype=np.float64)
    x = x - x.mean()
    y = y - y.mean()
    denominator = np.sqrt((x @ x) * (y @ y))
    return float(np.clip((x @ y) / denominator, -1.0, 1.0)) if denominator else 0.0


def spearman(labels, predictions):
    """Spearman's rank correlation: Pearson's correlation of the ranks, tied values sharing the
    average of the ranks they span; 0 when either side is constant."""
    return pearson(average_ranks(labels), average_ranks(predictions))


def average_ranks(values):
    """1-based ranks of ``values``, each run of equal values given the mean of its ranks
    (``[10, 20, 20, 5]`` -> ``[2, 3.5, 3.5, 1]``; SciPy's ``rankdata(method="average")``)."""
    values = np.asarray(values)
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    starts_run = np.concatenate([[True], sorted_values[1:] != sorted_values[:-1]])
    run_starts = np.flatnonzero(starts_run)
    run_ends = np.append(run_starts[1:], len(values))
    # Sorted positions start..end-1 hold ranks start+1..end, whose mean is (start + 1 + end) / 2.
    run_ranks = (run_starts + 1 + run_ends) / 2
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = run_ranks[np.cumsum(starts_run) - 1]
    return ranks


METRICS = {
    "accuracy": accuracy,
    "f1": f1,
    "matthews_correlation": matthews_correlation,
    "pearson": pearson,
    "spearman": spearman,
}


def score(task, labels, predictions):
    """Scores predictions with the task's metrics.

    Args:
        task: a `glue.Task` or a task name.
        labels: the split's labels (`glue.Examples.labels`), shape ``(n,)``.
        predictions: class ids of shape ``(n,)`` (the argmax of the logits); for stsb, the
            predicted scores.

    Returns:
        ``{metric: float}`` for each of ``task.metrics``.

    Raises:
        TypeError: class ids that are not integers.
        ValueError: shapes that are not ``(n,)`` with the same ``n > 0``, class ids outside
            ``[0, task.num_classes)``, or scores that are not finite.
    """
    task = glue.get_task(task)
    labels = np.asarray(labels)
    predictions = np.asarray(predictions)
    for name, values in (("labels", labels), ("predictions", predictions)):
        if values.ndim != 1 or len(values) == 0:
            raise ValueError(
                f"{name} must have shape (n,) with n > 0 (one per example), got shape "
                f"{values.shape}"
            )
    if labels.shape != predictions.shape:
        raise ValueError(
            f"labels and predictions must have the same shape, got {labels.shape} and "
            f"{predictions.shape}"
        )
    for name, values in (("labels", labels), ("predictions", predictions)):
        _check_values(task, name, values)
    return {metric: METRICS[metric](labels, predictions) for metric in task.metrics}


def _check_values(task, name, values):
    if task.num_classes == 1:
        if not np.issubdtype(values.dtype, np.number) or not np.all(np.isfinite(values)):
            raise ValueError(f"{name} of GLUE task {task.name!r} must be finite scores")
        return
    if not np.issubdtype(values.dtype, np.integer):
        raise TypeError(
            f"{name} of GLUE task {task.name!r} must be integer class ids, got dtype {values.dtype}"
        )
    outside = values[(values < 0) | (values >= task.num_classes)]
    if outside.size:
        raise ValueError(
            f"{name} of GLUE task {task.name!r} must be class ids in [0, {task.num_classes}), "
            f"got {outside[0]}"
        )
