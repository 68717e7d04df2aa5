"""Argument checks shared by every module: one wording, one exception type per kind of fault.

A value of the wrong type raises `TypeError`, a value of the right type outside what is allowed
raises `ValueError`; each message names the argument, the value and what is allowed, e.g.
``ValueError: beta_1 must be in [0, 1), got 1.5``.
"""

import math
import numbers


def type_error(argument, value, expected):
    """The TypeError for ``value`` of the wrong type: "<argument> must be <expected>, got ..."."""
    hint = ""
    if isinstance(value, str) and expected.startswith(("a number", "an integer")):
        # The usual way a string reaches a numeric argument: YAML 1.1 (PyYAML) reads 6e-3,
        # written without a decimal point, as a string.
        hint = " (in YAML, write 6e-3 as 6.0e-3)"
    return TypeError(
        f"{argument} must be {expected}, got {value!r} of type {type(value).__name__}{hint}"
    )


def _interval(low, high, low_open, high_open):
    left = "(" if low_open else "["
    right = ")" if high_open else "]"
    return f"{left}{'-inf' if low is None else low}, {'inf' if high is None else high}{right}"


def _check_range(argument, value, low, high, low_open, high_open):
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        raise ValueError(
            f"{argument} must be in {_interval(low, high, low_open, high_open)}, got {value!r}"
        )


def is_number(value):
    """True for a real number that is not a bool (Python's bool is an int)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_number(argument, value, *, low=None, high=None, low_open=False, high_open=False):
    """Raises unless ``value`` is a finite real number in the interval; returns it.

    ``low``/``high`` of None leave that side open-ended; ``low_open``/``high_open`` exclude the
    bound itself.
    """
    if not is_number(value):
        raise type_error(argument, value, "a number")
    if not math.isfinite(value):
        raise ValueError(
            f"{argument} must be a finite number in "
            f"{_interval(low, high, low_open, high_open)}, got {value!r}"
        )
    _check_range(argument, value, low, high, low_open, high_open)
    return value


def check_integer(argument, value, *, low=None, high=None):
    """Raises unless ``value`` is an integer (not a bool) in ``[low, high]``; returns it as int."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise type_error(argument, value, "an integer")
    _check_range(argument, value, low, high, False, False)
    return int(value)


def check_optional_integer(argument, value, *, low=None, high=None):
    """`check_integer`, with None also allowed (and returned)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise type_error(argument, value, "an integer or None")
    return check_integer(argument, value, low=low, high=high)


def check_bool(argument, value):
    """Raises TypeError unless ``value`` is True or False; returns it."""
    if not isinstance(value, bool):
        raise type_error(argument, value, "True or False")
    return value


def check_string(argument, value):
    """Raises TypeError unless ``value`` is a str; returns it."""
    if not isinstance(value, str):
        raise type_error(argument, value, "a string")
    return value


def check_choice(argument, value, allowed):
    """Raises ValueError unless ``value`` is one of ``allowed``; returns it."""
    if value not in allowed:
        raise ValueError(f"{argument} must be one of {list(allowed)}, got {value!r}")
    return value


def check_warmup_decay(
    peak_learning_rate,
    warmup_steps,
    total_steps,
    end_learning_rate,
    power,
    key="",
    warmup_name="warmup_steps",
    total_name="total_steps",
):
    """Checks the settings of a linear warmup then polynomial decay
    (`keras_largebatch.schedules.warmup_polynomial_decay`): the schedules' own arguments and
    the run configs' phases alike. ``key`` prefixes the rates' and the power's names (e.g.
    ``phases.0.``); ``warmup_name`` and ``total_name`` are the full names of the warmup and the
    total steps in the messages."""
    check_number(f"{key}peak_learning_rate", peak_learning_rate, low=0, low_open=True)
    check_number(total_name, total_steps, low=0, low_open=True)
    check_number(warmup_name, warmup_steps, low=0)
    check_number(f"{key}power", power, low=0, low_open=True)
    check_number(f"{key}end_learning_rate", end_learning_rate)
    if not warmup_steps < total_steps:
        raise ValueError(
            f"{warmup_name} must be < {total_name}={total_steps} (the decay needs at least one "
            f"step), got {warmup_name}={warmup_steps} >= {total_name}={total_steps}"
        )
    if not 0 <= end_learning_rate <= peak_learning_rate:
        raise ValueError(
            f"{key}end_learning_rate must be in [0, peak_learning_rate={peak_learning_rate}], "
            f"got {end_learning_rate}"
        )


def check_warmup_epochs(warmup_epochs, steps_per_epoch, total_steps, key="", total_name=None):
    """Checks that a warmup of ``warmup_epochs`` epochs of ``steps_per_epoch`` steps ends
    before the ``total_steps`` (`keras_largebatch.schedules.LarsMLPerfSchedule`, and the image
    recipe's phases). ``key`` prefixes the arguments' names; ``total_name`` names the total
    (default ``{key}total_steps``)."""
    total_name = total_name or f"{key}total_steps"
    check_number(f"{key}steps_per_epoch", steps_per_epoch, low=0, low_open=True)
    check_number(f"{key}warmup_epochs", warmup_epochs, low=0)
    check_number(total_name, total_steps, low=0, low_open=True)
    warmup_steps = warmup_epochs * steps_per_epoch
    if not warmup_steps < total_steps:
        raise ValueError(
            f"{key}warmup_epochs * steps_per_epoch must be < {total_name}, got "
            f"{warmup_epochs} * {steps_per_epoch} = {warmup_steps} >= {total_name}={total_steps}"
        )
