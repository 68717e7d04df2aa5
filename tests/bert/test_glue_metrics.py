"""GLUE's metrics against values computed by hand (the arithmetic is in the comments)."""

import math

import numpy as np
import pytest

from keras_largebatch.bert.finetuning import glue, glue_metrics

# Five examples: TP at 0 and 2, FP at 1, FN at 3, TN at 4.
LABELS = [1, 0, 1, 1, 0]
PREDICTIONS = [1, 1, 1, 0, 0]


def test_accuracy():
    # Right at 0, 2 and 4: 3 / 5.
    assert glue_metrics.accuracy(LABELS, PREDICTIONS) == pytest.approx(0.6)
    assert glue_metrics.accuracy([2, 0, 1], [2, 1, 1]) == pytest.approx(2 / 3)


def test_f1_of_the_positive_class():
    # TP = 2, FP = 1, FN = 1: precision 2/3, recall 2/3, F1 = 2 * 2 / (2 * 2 + 1 + 1) = 2/3.
    assert glue_metrics.f1(LABELS, PREDICTIONS) == pytest.approx(2 / 3)
    # TP = 1, FP = 0, FN = 2: precision 1, recall 1/3, F1 = 2 / (2 + 0 + 2) = 0.5.
    assert glue_metrics.f1([1, 1, 1, 0], [1, 0, 0, 0]) == pytest.approx(0.5)
    # Class 0 is the negative class: predicting every 0 right and no 1 gives TP = 0, FN = 2.
    assert glue_metrics.f1([0, 0, 1, 1], [0, 0, 0, 0]) == 0.0
    # No positive label and no positive prediction: 0/0, taken as 0 (scikit-learn's default).
    assert glue_metrics.f1([0, 0], [0, 0]) == 0.0


def test_matthews_correlation():
    # TP = 2, TN = 1, FP = 1, FN = 1:
    # (2 * 1 - 1 * 1) / sqrt((2 + 1)(2 + 1)(1 + 1)(1 + 1)) = 1 / sqrt(36) = 1/6.
    assert glue_metrics.matthews_correlation(LABELS, PREDICTIONS) == pytest.approx(1 / 6)
    assert glue_metrics.matthews_correlation([0, 1, 1], [0, 1, 1]) == pytest.approx(1.0)
    assert glue_metrics.matthews_correlation([0, 1, 1], [1, 0, 0]) == pytest.approx(-1.0)
    # Three classes. Label counts t = (2, 2, 2); prediction counts p = (2, 3, 1); correct c = 4
    # (positions 0, 2, 3, 4) of s = 6. (c s - p.t) = 24 - 12 = 12; s^2 - p.p = 36 - 14 = 22;
    # s^2 - t.t = 36 - 12 = 24; MCC = 12 / sqrt(22 * 24) = 12 / sqrt(528).
    assert glue_metrics.matthews_correlation(
        [0, 0, 1, 1, 2, 2], [0, 1, 1, 1, 2, 0]
    ) == pytest.approx(12 / math.sqrt(528))


def test_matthews_correlation_is_zero_when_undefined():
    # One predicted class: (TP + FP)(TN + FN) has a zero factor.
    assert glue_metrics.matthews_correlation([0, 1, 1, 0], [1, 1, 1, 1]) == 0.0
    # One label class.
    assert glue_metrics.matthews_correlation([1, 1, 1], [1, 0, 1]) == 0.0


def test_pearson():
    # x = 1, 2, 3, 4 (mean 2.5); y = 2, 4, 5, 9 (mean 5). Deviations (-1.5, -0.5, 0.5, 1.5) and
    # (-3, -1, 0, 4): sum of products 4.5 + 0.5 + 0 + 6 = 11, sums of squares 5 and 26,
    # r = 11 / sqrt(130).
    assert glue_metrics.pearson([1, 2, 3, 4], [2, 4, 5, 9]) == pytest.approx(11 / math.sqrt(130))
    assert glue_metrics.pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # A constant side leaves r undefined (0 / 0): 0.
    assert glue_metrics.pearson([1, 2, 3], [2, 2, 2]) == 0.0


def test_spearman_averages_the_ranks_of_ties():
    assert glue_metrics.average_ranks([10, 20, 20, 5]).tolist() == [2, 3.5, 3.5, 1]
    assert glue_metrics.average_ranks([7, 7, 7]).tolist() == [2, 2, 2]
    assert glue_metrics.average_ranks([3.0, 1.0, 2.0, 1.0, 3.0]).tolist() == [4.5, 1.5, 3, 1.5, 4.5]
    # Ranks of x = 1, 2, 2, 3 are 1, 2.5, 2.5, 4; of y = 1, 3, 2, 4 they are 1, 3, 2, 4.
    # Deviations from 2.5: (-1.5, 0, 0, 1.5) and (-1.5, 0.5, -0.5, 1.5): sum of products 4.5,
    # sums of squares 4.5 and 5, rho = 4.5 / sqrt(22.5) = 3 / sqrt(10).
    assert glue_metrics.spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(3 / math.sqrt(10))
    # A monotone, non-linear relation: rho is 1 where r is not.
    assert glue_metrics.spearman([1, 2, 3, 4], [1, 4, 9, 16]) == pytest.approx(1.0)
    assert glue_metrics.pearson([1, 2, 3, 4], [1, 4, 9, 16]) < 0.99
    assert glue_metrics.spearman([1, 2, 3], [5, 5, 5]) == 0.0


def test_score_returns_each_tasks_metrics():
    mrpc = glue_metrics.score("mrpc", np.array(LABELS, np.int32), np.array(PREDICTIONS))
    assert mrpc == pytest.approx({"f1": 2 / 3, "accuracy": 0.6})
    assert list(mrpc) == ["f1", "accuracy"]
    assert glue_metrics.score("cola", LABELS, PREDICTIONS) == pytest.approx(
        {"matthews_correlation": 1 / 6}
    )
    assert glue_metrics.score("next_sentence", LABELS, PREDICTIONS) == pytest.approx(
        {"accuracy": 0.6, "f1": 2 / 3}
    )
    assert glue_metrics.score("mnli", [0, 1, 2, 2], [0, 1, 2, 0]) == pytest.approx(
        {"accuracy": 0.75}
    )
    stsb = glue_metrics.score(
        "stsb", np.array([1, 2, 2, 3], np.float32), np.array([1.0, 3.0, 2.0, 4.0])
    )
    assert stsb == pytest.approx({"pearson": 3 / math.sqrt(10), "spearman": 3 / math.sqrt(10)})
    assert all(isinstance(value, float) for value in stsb.values())
    for name in glue.TASK_NAMES:
        task = glue.get_task(name)
        assert set(task.metrics) <= set(glue_metrics.METRICS)
        assert task.metrics[0] == task.main_metric


def test_score_rejects_bad_predictions():
    with pytest.raises(
        ValueError, match=r"predictions must have shape \(n,\) .*got shape \(2, 2\)"
    ):
        glue_metrics.score("sst2", [0, 1], [[0.2, 0.8], [0.9, 0.1]])
    with pytest.raises(ValueError, match=r"labels and predictions must have the same shape"):
        glue_metrics.score("sst2", [0, 1], [0, 1, 1])
    with pytest.raises(ValueError, match=r"labels must have shape \(n,\) with n > 0"):
        glue_metrics.score("sst2", [], [])
    with pytest.raises(
        TypeError, match="predictions of GLUE task 'sst2' must be integer class ids"
    ):
        glue_metrics.score("sst2", [0, 1], [0.0, 1.0])
    with pytest.raises(ValueError, match=r"must be class ids in \[0, 3\), got 3"):
        glue_metrics.score("mnli", [0, 1], [0, 3])
    with pytest.raises(ValueError, match="predictions of GLUE task 'stsb' must be finite scores"):
        glue_metrics.score("stsb", [1.0, 2.0], [1.0, np.nan])
