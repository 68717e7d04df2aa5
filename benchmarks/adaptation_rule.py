"""Which variables LAMB and LARS should adapt: a small text-classification transformer.

keras-io's "Text classification with Transformer" example trains on IMDB, which cannot be
downloaded here; this stand-in keeps its model (token and position embeddings, one transformer
block with two LayerNorms, average pooling, two dense layers, dropout) and its schedule
(warmup then linear decay, 3 epochs), on a synthetic sentiment task that is learnable: each
sequence holds 10 "sentiment" tokens, drawn from the positive half of a 100-token sentiment
vocabulary with probability 0.8 when the label is 1 (0.2 when 0), among neutral tokens.

    KERAS_BACKEND=jax python benchmarks/adaptation_rule.py \
        --rates 2e-2 5e-3 --lars-rates 1.0 0.1 --seeds 0 1 2

prints, as JSON on stdout (a line per setting on stderr as it goes), the validation accuracy
after the last epoch, ``{"rate_R": {"KIND": {"seed_S": accuracy}}}``, for each rule a user may
take, each at every rate of its family:

- ``lamb_exclude_biases_norms``: LAMB leaving biases and normalization parameters unadapted
  (google-research/bert's and the MLPerf references' rule, `biases_and_norms`);
- ``lamb_adapt_all``: LAMB adapting every variable (the papers' algorithms, Keras's `Lamb`,
  optax, timm; LAMB's default);
- ``lamb_adapt_all_max_1``: every variable adapted, the ratio bounded by 1 (timm's
  ``trust_clip``);
- ``keras_lamb``: Keras's `Lamb`;
- ``lars_exclude_biases_norms``, ``lars_adapt_all`` (LARS's default): the same two rules
  for LARS (momentum 0.9, trust coefficient 0.001), at the ``--lars-rates``;
- ``sgd_momentum``: Keras's SGD with momentum 0.9 at the LARS rates.

``null`` (``diverged`` on stderr) means the training loss was not finite at the end.
"""

import argparse
import json
import sys

import keras
import numpy as np

from keras_largebatch import LAMB, LARS
from keras_largebatch.optimizers import biases_and_norms
from keras_largebatch.schedules import WarmupPolynomialDecay

VOCABULARY, LENGTH, SENTIMENT, EMBED = 2000, 64, 100, 32


def _data(seed, count):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(SENTIMENT, VOCABULARY, size=(count, LENGTH))
    labels = rng.integers(0, 2, size=count)
    for i in range(count):
        positive = rng.random(10) < (0.8 if labels[i] else 0.2)
        words = np.where(
            positive,
            rng.integers(0, SENTIMENT // 2, 10),
            rng.integers(SENTIMENT // 2, SENTIMENT, 10),
        )
        tokens[i, rng.choice(LENGTH, 10, replace=False)] = words
    return tokens.astype("int32"), labels.astype("int32")


def _model():
    inputs = keras.Input((LENGTH,), dtype="int32")
    positions = keras.ops.arange(LENGTH)
    x = keras.layers.Embedding(VOCABULARY, EMBED)(inputs) + keras.layers.Embedding(LENGTH, EMBED)(
        positions
    )
    attention = keras.layers.MultiHeadAttention(num_heads=2, key_dim=EMBED)(x, x)
    x = keras.layers.LayerNormalization(epsilon=1e-6)(x + keras.layers.Dropout(0.1)(attention))
    ffn = keras.layers.Dense(EMBED)(keras.layers.Dense(32, activation="relu")(x))
    x = keras.layers.LayerNormalization(epsilon=1e-6)(x + keras.layers.Dropout(0.1)(ffn))
    x = keras.layers.GlobalAveragePooling1D()(x)
    x = keras.layers.Dense(20, activation="relu")(keras.layers.Dropout(0.1)(x))
    outputs = keras.layers.Dense(2, activation="softmax")(keras.layers.Dropout(0.1)(x))
    return keras.Model(inputs, outputs)


LAMB_KINDS = ("lamb_exclude_biases_norms", "lamb_adapt_all", "lamb_adapt_all_max_1", "keras_lamb")
LARS_KINDS = ("lars_exclude_biases_norms", "lars_adapt_all", "sgd_momentum")


def _optimizer(kind, rate, steps):
    schedule = WarmupPolynomialDecay(
        peak_learning_rate=rate, total_steps=steps, warmup_steps=steps // 10
    )
    if kind == "keras_lamb":
        return keras.optimizers.Lamb(learning_rate=schedule)
    if kind == "sgd_momentum":
        return keras.optimizers.SGD(learning_rate=schedule, momentum=0.9)
    rule = biases_and_norms if kind.endswith("exclude_biases_norms") else []
    if kind.startswith("lars"):
        return LARS(learning_rate=schedule, momentum=0.9, exclude_from_layer_adaptation=rule)
    bound = 1.0 if kind.endswith("max_1") else None
    return LAMB(learning_rate=schedule, exclude_from_layer_adaptation=rule, max_trust_ratio=bound)


def _train(kind, rate, seed, steps, train, validation, epochs):
    """The last epoch's validation accuracy, or None if the training loss is not finite."""
    keras.utils.set_random_seed(seed)
    model = _model()
    model.compile(
        optimizer=_optimizer(kind, rate, steps),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    history = model.fit(*train, batch_size=32, epochs=epochs, validation_data=validation, verbose=0)
    if not np.isfinite(history.history["loss"][-1]):
        return None
    return float(history.history["val_accuracy"][-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[2e-2, 5e-3], help="LAMB's")
    parser.add_argument(
        "--lars-rates", type=float, nargs="+", default=[1.0, 0.1], help="LARS's and SGD's"
    )
    parser.add_argument("--families", nargs="+", choices=("lamb", "lars"), default=["lamb", "lars"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--train", type=int, default=4000, help="training examples")
    parser.add_argument("--validation", type=int, default=1000, help="validation examples")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    x, y = _data(100, args.train)
    x_val, y_val = _data(200, args.validation)
    epochs = args.epochs
    steps = epochs * (args.train // 32)
    report = {}
    grid = [(rate, kind) for rate in args.rates for kind in LAMB_KINDS] * ("lamb" in args.families)
    grid += [(rate, kind) for rate in args.lars_rates for kind in LARS_KINDS] * (
        "lars" in args.families
    )
    for rate, kind in grid:
        accuracies = [
            _train(kind, rate, seed, steps, (x, y), (x_val, y_val), epochs) for seed in args.seeds
        ]
        report.setdefault(f"rate_{rate:g}", {})[kind] = {
            f"seed_{seed}": accuracy for seed, accuracy in zip(args.seeds, accuracies)
        }
        print(
            f"rate {rate:g} {kind:26} "
            + " ".join("diverged" if a is None else f"{a:.2f}" for a in accuracies),
            file=sys.stderr,
            flush=True,
        )
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
