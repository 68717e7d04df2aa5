"""The optimizer factory: ours and Keras's baselines decay the same variables."""

import keras
import pytest

from keras_largebatch.optimizers import LARS
from keras_largebatch.schedules import WarmupPolynomialDecay
from keras_largebatch.training.optimizer_factory import (
    OPTIMIZER_NAMES,
    adapts,
    create_optimizer,
    decays,
)


def _model():
    """Kernels, biases, a batch norm and a layer norm, with paths to match."""
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(8, name="hidden"),
            keras.layers.BatchNormalization(name="hidden_bn"),
            keras.layers.LayerNormalization(name="layer_norm"),
            keras.layers.Dense(1, name="output"),
        ]
    )
    return model, model.trainable_variables


def _undecayed(optimizer, variables):
    """The paths below the model's name of the variables ``optimizer`` does not decay."""
    optimizer.build(variables)
    return {v.path.split("/", 1)[1] for v in variables if not decays(optimizer, v)}


@pytest.mark.parametrize(
    "rule, expected",
    [
        # The default rule: rank 0 and 1 (biases, normalization parameters).
        (
            None,
            {
                "hidden/bias",
                "hidden_bn/gamma",
                "hidden_bn/beta",
                "layer_norm/gamma",
                "layer_norm/beta",
                "output/bias",
            },
        ),
        (["layer_norm"], {"layer_norm/gamma", "layer_norm/beta"}),  # searched in the path
        ([], set()),
    ],
)
def test_a_baseline_decays_what_ours_decays(rule, expected):
    _, variables = _model()
    undecayed = {}
    for ours, baseline in (("lamb", "adamw"), ("lars", "sgd"), ("lamb", "keras_lamb")):
        for name in (ours, baseline):
            optimizer = create_optimizer(
                name,
                0.1,
                weight_decay=0.01,
                exclude_from_weight_decay=rule,
                variables=variables,
            )
            undecayed[name] = _undecayed(optimizer, variables)
    assert all(paths == expected for paths in undecayed.values()), undecayed


def test_the_hyperparameters_and_accumulation_reach_the_optimizer():
    lars = create_optimizer(
        "lars", 0.5, momentum=0.95, nesterov=True, gradient_accumulation_steps=4
    )
    assert isinstance(lars, LARS) and (lars.momentum, lars.nesterov) == (0.95, True)
    assert lars.gradient_accumulation_steps == 4
    sgd = create_optimizer("sgd", 0.5, momentum=0.9, gradient_accumulation_steps=1)
    assert isinstance(sgd, keras.optimizers.SGD) and sgd.gradient_accumulation_steps is None


def test_a_baseline_with_a_schedule_and_accumulation_is_refused():
    schedule = WarmupPolynomialDecay(1.0, total_steps=10, warmup_steps=2)
    with pytest.raises(
        ValueError,
        match=r"gradient_accumulation_steps=2 with a learning-rate schedule needs one of "
        r"\('lamb', 'lars'\), got optimizer 'adamw'",
    ):
        create_optimizer("adamw", schedule, gradient_accumulation_steps=2)
    assert create_optimizer("lamb", schedule, gradient_accumulation_steps=2)
    assert create_optimizer("adamw", 0.1, gradient_accumulation_steps=2)  # a float rate


def test_bad_names_and_missing_variables_are_refused():
    with pytest.raises(ValueError, match=r"optimizer must be one of \['lamb', 'lars', 'sgd'"):
        create_optimizer("adam", 0.1)
    assert OPTIMIZER_NAMES == ("lamb", "lars", "sgd", "adamw", "keras_lamb")
    with pytest.raises(ValueError, match=r"pass variables=model.trainable_variables"):
        create_optimizer("sgd", 0.1, weight_decay=0.01, exclude_from_weight_decay=["bias"])


def test_adapts_answers_for_every_optimizer():
    _, variables = _model()
    expected = {
        # Keras's Lamb has a trust ratio on every variable and no exclusion; SGD and AdamW none.
        "keras_lamb": {v.path for v in variables},
        "sgd": set(),
        "adamw": set(),
        # Ours adapt every variable by default, as Keras's Lamb.
        "lamb": {v.path for v in variables},
        "lars": {v.path for v in variables},
    }
    for name, adapted in expected.items():
        optimizer = create_optimizer(name, 0.1, weight_decay=0.01, variables=variables)
        optimizer.build(variables)
        assert {v.path for v in variables if adapts(optimizer, v)} == adapted, name
        # Without weight decay nothing decays, whatever the exclusions.
        optimizer = create_optimizer(name, 0.1, weight_decay=0.0, variables=variables)
        optimizer.build(variables)
        assert not any(decays(optimizer, v) for v in variables), name
