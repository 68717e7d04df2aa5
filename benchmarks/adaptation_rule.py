"""Which variables LAMB should adapt: a small text-classification transformer, three seeds.

keras-io's "Text classification with Transformer" example trains on IMDB, which cannot be
downloaded here; this stand-in keeps its model (token and position embeddings, one transformer
block with two LayerNorms, average pooling, two dense layers, dropout) and its schedule
(warmup then linear decay, 3 epochs), on a synthetic sentiment task that is learnable: each
sequence holds 10 "sentiment" tokens, drawn from the positive half of a 100-token sentiment
vocabulary with probability 0.8 when the label is 1 (0.2 when 0), among neutral tokens.

    KERAS_BACKEND=jax python benchmarks/adaptation_rule.py --rates 2e-2 5e-3 --seeds 0 1 2

prints, as JSON on stdout (a line per setting on stderr as it goes), the validation accuracy
after 3 epochs for LAMB with its default exclusions, LAMB adapting every variable
(`exclude_from_layer_adaptation=[]`) and Keras's `Lamb`: ``{"rate_R": {"KIND": {"seed_S":
accuracy}}}``.
"""

import argparse
import json
import sys

import keras
import numpy as np

from keras_largebatch import LAMB
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


def _optimizer(kind, rate, steps):
    schedule = WarmupPolynomialDecay(
        peak_learning_rate=rate, total_steps=steps, warmup_steps=steps // 10
    )
    if kind == "keras_lamb":
        return keras.optimizers.Lamb(learning_rate=schedule)
    if kind == "lamb_adapt_all":
        return LAMB(learning_rate=schedule, exclude_from_layer_adaptation=[])
    return LAMB(learning_rate=schedule)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[2e-2, 5e-3])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--train", type=int, default=4000, help="training examples")
    parser.add_argument("--validation", type=int, default=1000, help="validation examples")
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    x, y = _data(100, args.train)
    x_val, y_val = _data(200, args.validation)
    batch, epochs = 32, args.epochs
    steps = epochs * (args.train // batch)
    report = {}
    for rate in args.rates:
        for kind in ("lamb_default", "lamb_adapt_all", "keras_lamb"):
            accuracies = []
            for seed in args.seeds:
                keras.utils.set_random_seed(seed)
                model = _model()
                model.compile(
                    optimizer=_optimizer(kind, rate, steps),
                    loss="sparse_categorical_crossentropy",
                    metrics=["accuracy"],
                )
                history = model.fit(
                    x, y, batch_size=batch, epochs=epochs, validation_data=(x_val, y_val), verbose=0
                )
                accuracies.append(float(history.history["val_accuracy"][-1]))
            report.setdefault(f"rate_{rate:g}", {})[kind] = {
                f"seed_{seed}": accuracy for seed, accuracy in zip(args.seeds, accuracies)
            }
            print(
                f"rate {rate:g} {kind:15} " + " ".join(f"{a:.2f}" for a in accuracies),
                file=sys.stderr,
                flush=True,
            )
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
