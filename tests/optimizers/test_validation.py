import math

import pytest

from keras_largebatch import LAMB, LARS

COMMON = [
    ("learning_rate", -1e-3, ValueError, r"learning_rate must be in \[0.0, inf\], got -0.001"),
    ("learning_rate", math.nan, ValueError, r"learning_rate must be a finite number in .*got nan"),
    ("learning_rate", math.inf, ValueError, r"learning_rate must be a finite number in .*got inf"),
    (
        "learning_rate",
        "6e-3",
        TypeError,
        r"learning_rate must be a number >= 0, a LearningRateSchedule.*got '6e-3'",
    ),
    ("weight_decay", -0.1, ValueError, r"weight_decay must be in \[0.0, inf\], got -0.1"),
    ("weight_decay", "0.01", TypeError, r"weight_decay must be a number, got '0.01'"),
    ("epsilon", -1e-6, ValueError, r"epsilon must be in \[0.0, inf\], got -1e-06"),
    ("min_trust_ratio", -1.0, ValueError, r"min_trust_ratio must be in .*got -1.0"),
    ("max_trust_ratio", 0.0, ValueError, r"max_trust_ratio must be in \(0.0, inf\], got 0.0"),
    (
        "exclude_from_weight_decay",
        ["(unclosed"],
        ValueError,
        r"exclude_from_weight_decay holds an invalid regular expression '\(unclosed'",
    ),
    (
        "exclude_from_layer_adaptation",
        "bias",
        TypeError,
        r"exclude_from_layer_adaptation must be None, a list of regular expressions or a "
        r"callable, got 'bias'",
    ),
    (
        "exclude_from_weight_decay",
        [3],
        TypeError,
        r"exclude_from_weight_decay must hold regular-expression strings, got 3",
    ),
    ("record_trust_ratio", 1, TypeError, r"record_trust_ratio must be True or False, got 1"),
    ("global_clipnorm", -1.0, ValueError, r"global_clipnorm must be in \(0.0, inf\], got -1.0"),
    (
        "gradient_accumulation_steps",
        0,
        ValueError,
        r"gradient_accumulation_steps must be an integer >= 2, or None for no accumulation "
        r"\(as in Keras\), got 0",
    ),
    (
        "gradient_accumulation_steps",
        1,
        ValueError,
        r"gradient_accumulation_steps must be an integer >= 2, or None .*got 1",
    ),
    (
        "gradient_accumulation_steps",
        2.5,
        TypeError,
        r"gradient_accumulation_steps must be an integer or None, got 2.5",
    ),
]

LAMB_ONLY = [
    ("beta_1", 1.5, ValueError, r"beta_1 must be in \[0.0, 1.0\), got 1.5"),
    ("beta_1", 1.0, ValueError, r"beta_1 must be in \[0.0, 1.0\), got 1.0"),
    ("beta_2", -0.1, ValueError, r"beta_2 must be in \[0.0, 1.0\), got -0.1"),
    ("bias_correction", "yes", TypeError, r"bias_correction must be True or False, got 'yes'"),
]

LARS_ONLY = [
    ("momentum", 1.0, ValueError, r"momentum must be in \[0.0, 1.0\), got 1.0"),
    ("momentum", -0.5, ValueError, r"momentum must be in \[0.0, 1.0\), got -0.5"),
    (
        "trust_coefficient",
        -0.001,
        ValueError,
        r"trust_coefficient must be in \(0.0, inf\], got -0.001",
    ),
    # 0 would silently freeze every adapted variable.
    ("trust_coefficient", 0.0, ValueError, r"trust_coefficient must be in \(0.0, inf\], got 0.0"),
    ("nesterov", "true", TypeError, r"nesterov must be True or False, got 'true'"),
    ("clip", None, TypeError, r"clip must be True or False, got None"),
]


@pytest.mark.parametrize("argument, value, error, message", COMMON + LAMB_ONLY)
def test_lamb_rejects(argument, value, error, message):
    with pytest.raises(error, match=message):
        LAMB(**{argument: value})


@pytest.mark.parametrize("argument, value, error, message", COMMON + LARS_ONLY)
def test_lars_rejects(argument, value, error, message):
    with pytest.raises(error, match=message):
        LARS(**{argument: value})


@pytest.mark.parametrize("optimizer", [LAMB, LARS])
def test_bounds_in_wrong_order(optimizer):
    with pytest.raises(
        ValueError,
        match=r"min_trust_ratio must be <= max_trust_ratio, "
        r"got min_trust_ratio=2.0 > max_trust_ratio=1.0",
    ):
        optimizer(min_trust_ratio=2.0, max_trust_ratio=1.0)


def test_trust_ratios_needs_recording():
    with pytest.raises(ValueError, match="record_trust_ratio=True"):
        LAMB().trust_ratios()
