"""BertPretrainer: its heads, its loss against NumPy, its exclusions, and 2 replicas vs 1."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch import LAMB
from keras_largebatch.bert.pretraining import config as config_lib
from keras_largebatch.bert.pretraining import model as model_lib

VOCABULARY_SIZE = 50
SEQ_LENGTH = 12
MAX_PREDICTIONS = 3


def _tiny_pretrainer(dropout=0.0, dtype=None):
    backbone = model_lib.bert_backbone(
        "tiny",
        VOCABULARY_SIZE,
        max_sequence_length=SEQ_LENGTH,
        dropout=dropout,
        num_layers=1,
        hidden_dim=16,
        num_heads=2,
        dtype=dtype,
    )
    return model_lib.BertPretrainer(backbone)


def _batch(batch_size, seed=0):
    """Random features, labels and weights with a different number of masked tokens per row."""
    rng = np.random.default_rng(seed)
    features = {
        "token_ids": rng.integers(5, VOCABULARY_SIZE, (batch_size, SEQ_LENGTH)).astype("int32"),
        "segment_ids": (np.arange(SEQ_LENGTH) >= SEQ_LENGTH // 2)
        .astype("int32")[None]
        .repeat(batch_size, 0),
        "padding_mask": np.ones((batch_size, SEQ_LENGTH), "int32"),
        "mask_positions": rng.integers(1, SEQ_LENGTH, (batch_size, MAX_PREDICTIONS)).astype(
            "int32"
        ),
    }
    counts = rng.integers(1, MAX_PREDICTIONS + 1, batch_size)
    masked_lm_weights = (np.arange(MAX_PREDICTIONS)[None] < counts[:, None]).astype("float32")
    labels = {
        "masked_lm": rng.integers(0, VOCABULARY_SIZE, (batch_size, MAX_PREDICTIONS)).astype(
            "int32"
        ),
        "next_sentence": rng.integers(0, 2, batch_size).astype("int32"),
    }
    weights = {"masked_lm": masked_lm_weights, "next_sentence": np.ones(batch_size, "float32")}
    return features, labels, weights


def _cross_entropy(logits, labels):
    logits = logits.astype(np.float64)
    shifted = logits - logits.max(-1, keepdims=True)
    log_softmax = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    return -np.take_along_axis(log_softmax, labels[..., None], -1)[..., 0]


def test_sizes_are_google_research_berts():
    # google-research/bert's README table of sizes, written out again as the reference.
    expected = {
        "tiny": (2, 128, 2),
        "mini": (4, 256, 4),
        "small": (4, 512, 8),
        "medium": (8, 512, 8),
        "base": (12, 768, 12),
        "large": (24, 1024, 16),
    }
    assert {
        name: (size["num_layers"], size["hidden_dim"], size["num_heads"])
        for name, size in model_lib.MODEL_SIZES.items()
    } == expected


def test_bert_tiny_has_the_published_parameter_count():
    # BERT-tiny, uncased vocabulary: embeddings + 2 layers + pooler, counted by hand.
    vocabulary, hidden, intermediate, layers, positions = 30522, 128, 512, 2, 512
    embeddings = (vocabulary + positions + 2) * hidden + 2 * hidden
    layer = 4 * (hidden * hidden + hidden) + 2 * hidden * intermediate + intermediate + hidden
    layer += 2 * 2 * hidden
    pooler = hidden * hidden + hidden
    backbone = model_lib.bert_backbone("tiny", vocabulary)
    assert backbone.count_params() == embeddings + layers * layer + pooler  # ~4.4M
    assert model_lib.MODEL_SIZES["tiny"]["hidden_dim"] * 4 == backbone.intermediate_dim


def test_unknown_size_is_an_error():
    with pytest.raises(ValueError, match=r"size must be one of .*'large'\], got 'huge'"):
        model_lib.bert_backbone("huge", 100)


def test_masked_lm_head_is_tied_to_the_token_embedding():
    model = _tiny_pretrainer()
    # The only [vocabulary, hidden] matrix is the token embedding: no separate output kernel.
    vocabulary_matrices = [w.path for w in model.weights if tuple(w.shape) == (VOCABULARY_SIZE, 16)]
    assert vocabulary_matrices == ["token_embedding/embeddings"]
    features, _, _ = _batch(2)
    before = model(features)["masked_lm"].numpy()
    embedding = model.backbone.token_embedding.embeddings
    embedding.assign(embedding * 2.0)
    assert not np.allclose(model(features)["masked_lm"].numpy(), before)
    assert {"mlm_head/output_bias", "nsp_head/kernel"} <= {w.path for w in model.weights}


def test_loss_and_metrics_equal_numpy():
    model = _tiny_pretrainer()
    features, labels, weights = _batch(4)
    outputs = model(features)
    loss = float(model.compute_loss(features, labels, outputs, weights))
    masked_lm_ce = _cross_entropy(outputs["masked_lm"].numpy(), labels["masked_lm"])
    next_sentence_ce = _cross_entropy(outputs["next_sentence"].numpy(), labels["next_sentence"])
    w = weights["masked_lm"]
    expected_masked_lm = (masked_lm_ce * w).sum() / w.sum()
    assert w.sum() < w.size  # padded predictions are present, and must weigh nothing
    np.testing.assert_allclose(loss, expected_masked_lm + next_sentence_ce.mean(), rtol=1e-5)
    metrics = {m.name: float(m.result()) for m in model.metrics}
    np.testing.assert_allclose(metrics["masked_lm_loss"], expected_masked_lm, rtol=1e-5)
    correct = outputs["masked_lm"].numpy().argmax(-1) == labels["masked_lm"]
    np.testing.assert_allclose(
        metrics["masked_lm_accuracy"], (correct * w).sum() / w.sum(), rtol=1e-6
    )
    nsp_correct = outputs["next_sentence"].numpy().argmax(-1) == labels["next_sentence"]
    np.testing.assert_allclose(metrics["next_sentence_accuracy"], nsp_correct.mean(), rtol=1e-6)


def test_bert_exclusions_match_exactly_layer_norms_and_biases():
    model = _tiny_pretrainer()
    # Independent criterion: the short names Keras gives LayerNorm and bias variables.
    expected = {
        w.path
        for w in model.trainable_weights
        if w.name in ("gamma", "beta") or w.name.endswith("bias")
    }
    assert any("query/bias" in path for path in expected)  # rank 2: a rank rule would miss it
    optimizer = LAMB(
        weight_decay=0.01,
        exclude_from_weight_decay=list(config_lib.BERT_EXCLUSIONS),
        exclude_from_layer_adaptation=list(config_lib.BERT_EXCLUSIONS),
    )
    optimizer.build(model.trainable_weights)
    excluded_from_decay = {w.path for w in model.trainable_weights if not optimizer.decays(w)}
    excluded_from_adaptation = {w.path for w in model.trainable_weights if not optimizer.adapts(w)}
    assert excluded_from_decay == expected
    assert excluded_from_adaptation == expected


def _train(strategy, steps, global_batch):
    keras.utils.set_random_seed(7)
    with strategy.scope():
        model = _tiny_pretrainer()
        model.compile(
            optimizer=LAMB(
                1e-2,
                weight_decay=0.01,
                global_clipnorm=1.0,
                exclude_from_weight_decay=["layer_norm", "bias"],
            )
        )
    features, labels, weights = _batch(global_batch * steps, seed=3)
    # Put all the masked tokens of each batch's second half on the second replica's examples:
    # the replicas' weight sums then differ, which a per-replica mean would get wrong.
    for start in range(0, global_batch * steps, global_batch):
        weights["masked_lm"][start : start + global_batch // 2, 1:] = 0.0
    dataset = tf.data.Dataset.from_tensor_slices((features, labels, weights)).batch(global_batch)
    history = model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0, shuffle=False)
    return [w.numpy() for w in model.weights], history.history


def test_two_replicas_equal_one_device():
    one, one_history = _train(tf.distribute.OneDeviceStrategy("/cpu:0"), steps=3, global_batch=8)
    two, two_history = _train(
        tf.distribute.MirroredStrategy(
            ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
        ),
        steps=3,
        global_batch=8,
    )
    for a, b in zip(one, two):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    for name in ("loss", "masked_lm_loss", "masked_lm_accuracy", "next_sentence_accuracy"):
        np.testing.assert_allclose(two_history[name], one_history[name], rtol=1e-5)
