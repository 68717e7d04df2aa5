"""BERT for pretraining: keras-hub's `BertBackbone` with masked-LM and next-sentence heads.

`BertPretrainer` takes the batches of `input_pipeline.make_pretraining_dataset` as they are and
computes its own loss and metrics, so it is compiled with an optimizer only:

    backbone = bert_backbone("tiny", vocabulary_size=8000)
    model = BertPretrainer(backbone)
    model.compile(optimizer=keras_largebatch.LAMB(...))
    model.fit(dataset, ...)

`layout_map` splits its large kernels over the "model" axis of a device mesh, for
`keras.distribution.ModelParallel`.
"""

import json
import os

import keras
from keras import ops

from keras_largebatch import _extras
from keras_largebatch.bert.pretraining.config import MODEL_SIZES

try:
    import keras_hub
except ModuleNotFoundError as error:
    raise _extras.missing_extra(__name__, "bert", error) from error

FEATURE_NAMES = ("token_ids", "segment_ids", "padding_mask", "mask_positions")

# Variable path (a regex of `keras.distribution.LayoutMap`) -> the mesh axis of each dimension,
# for the variables of a `BertBackbone` (inside a `BertPretrainer` or not) that `layout_map`
# splits; every other variable is replicated.
_LAYOUTS = {
    # Columns: each device looks up and projects with its share of the hidden features.
    r"(.*/)?token_embedding/embeddings": (None, "model"),
    # Column-parallel: (hidden, heads, head_dim) and (heads, head_dim), each device its heads.
    r"(.*/)?transformer_layer_\d+/self_attention_layer/(query|key|value)/kernel": (
        None,
        "model",
        None,
    ),
    r"(.*/)?transformer_layer_\d+/self_attention_layer/(query|key|value)/bias": ("model", None),
    # Row-parallel: (heads, head_dim, hidden), the partial sums over the heads all-reduced.
    r"(.*/)?transformer_layer_\d+/self_attention_layer/attention_output/kernel": (
        "model",
        None,
        None,
    ),
    # Column- then row-parallel: (hidden, intermediate) by columns, (intermediate, hidden) by rows.
    r"(.*/)?transformer_layer_\d+/feedforward_intermediate_dense/kernel": (None, "model"),
    r"(.*/)?transformer_layer_\d+/feedforward_intermediate_dense/bias": ("model",),
    r"(.*/)?transformer_layer_\d+/feedforward_output_dense/kernel": ("model", None),
}


def bert_backbone(
    size,
    vocabulary_size,
    max_sequence_length=512,
    dropout=0.1,
    num_layers=None,
    hidden_dim=None,
    num_heads=None,
    intermediate_dim=None,
    dtype=None,
):
    """A randomly initialized `keras_hub.models.BertBackbone` of a named size, built offline.

    Args:
        size: a key of `MODEL_SIZES`.
        vocabulary_size: rows of the token embedding.
        max_sequence_length: rows of the position embedding (512 in the released models).
        dropout: dropout rate.
        num_layers: replaces the size's value when not None.
        hidden_dim: replaces the size's value when not None.
        num_heads: replaces the size's value when not None.
        intermediate_dim: feedforward width; None is ``4 * hidden_dim``.
        dtype: a dtype policy name such as "mixed_bfloat16", or None for the global policy.

    Raises:
        ValueError: an unknown size.
    """
    if size not in MODEL_SIZES:
        raise ValueError(f"size must be one of {list(MODEL_SIZES)}, got {size!r}")
    dimensions = MODEL_SIZES[size]
    hidden_dim = hidden_dim or dimensions["hidden_dim"]
    return keras_hub.models.BertBackbone(
        vocabulary_size=vocabulary_size,
        num_layers=num_layers or dimensions["num_layers"],
        num_heads=num_heads or dimensions["num_heads"],
        hidden_dim=hidden_dim,
        intermediate_dim=intermediate_dim or 4 * hidden_dim,
        dropout=dropout,
        max_sequence_length=max_sequence_length,
        num_segments=2,
        dtype=dtype,
    )


def backbone_from_preset(preset, dropout=0.1, dtype=None, load_weights=False):
    """The `keras_hub.models.BertBackbone` of a preset directory on disk (keras-hub's own
    loader, so nothing is downloaded): its architecture, with its weights when
    ``load_weights``; ``dropout`` and ``dtype`` (a policy name or None for the global policy)
    replace the preset's."""
    return keras_hub.models.BertBackbone.from_preset(
        preset, load_weights=load_weights, dropout=dropout, dtype=dtype
    )


def load_preset_weights(pretrainer, preset):
    """Sets ``pretrainer``'s backbone to the weights of ``preset``, and its masked-LM head to
    the preset's where the preset holds a `keras_hub.models.BertMaskedLM` task with weights
    (``task.json`` and ``task.weights.h5``); the next-sentence head keeps its own.

    Returns True when the masked-LM head was loaded too.
    """
    backbone = pretrainer.backbone
    loaded = backbone_from_preset(preset, dtype=backbone.dtype_policy.name, load_weights=True)
    backbone.set_weights(loaded.get_weights())
    if not _has_masked_lm_task(preset):
        return False
    task = keras_hub.models.BertMaskedLM.from_preset(
        preset, dtype=backbone.dtype_policy.name, preprocessor=None
    )
    # BertMaskedLM's head ties its output projection to the token embedding, as ours does:
    # its own weights are the dense layer, the layer norm and the output bias.
    pretrainer.get_layer("mlm_head").set_weights(task.masked_lm_head.get_weights())
    return True


def _has_masked_lm_task(preset):
    task_config = os.path.join(preset, "task.json")
    if not os.path.isfile(os.path.join(preset, "task.weights.h5")) or not os.path.isfile(
        task_config
    ):
        return False
    with open(task_config, encoding="utf-8") as stream:
        return json.load(stream).get("class_name") == "BertMaskedLM"


def layout_map(device_mesh):
    """The `keras.distribution.LayoutMap` that splits a BERT's large kernels over the "model"
    axis of ``device_mesh`` as Megatron-LM does (Shoeybi et al. 2019, "Megatron-LM: Training
    Multi-Billion Parameter Language Models Using Model Parallelism", arXiv:1909.08053,
    section 3): in each transformer layer the query, key and value kernels and biases by
    attention heads and the attention output kernel by the same heads, the feed-forward
    intermediate kernel and bias by columns and the output kernel by rows, so that a layer's
    attention and its feed-forward block each need one all-reduce of their output. The small
    variables (position and segment embeddings, layer norms, the row-parallel biases, the
    pooler and the heads) are replicated.

    The token embedding is split by its hidden features, not by its rows as Megatron-LM's
    vocabulary-parallel embedding is: JAX splits a dimension only into equal parts, and
    BERT's 30,522-row vocabulary divides by no power of two above 2 (Megatron-LM pads it, which
    would change the model); its 768 or 1,024 hidden features divide like its heads.

    Every dimension split must be divisible by the size of the "model" axis (the recipe
    checks, `keras_largebatch.bert.pretraining.recipe.BertPretraining.layout_map`).
    """
    layouts = keras.distribution.LayoutMap(device_mesh)
    for path, axes in _LAYOUTS.items():
        layouts[path] = axes
    return layouts


class BertPretrainer(keras.Model):
    """BERT with the two pretraining heads and their losses and metrics.

    Inputs: a dict with ``token_ids``, ``segment_ids``, ``padding_mask`` ``[batch, seq_length]``
    and ``mask_positions`` ``[batch, max_predictions]``. Outputs: a dict with float32 logits
    ``masked_lm`` ``[batch, max_predictions, vocabulary_size]`` and ``next_sentence``
    ``[batch, 2]``.

    Heads, as in google-research/bert: the masked-LM head (keras-hub's `MaskedLMHead`) gathers
    the hidden states at the masked positions, applies dense + gelu + LayerNorm, and projects
    with the transposed token embedding (tied) plus an output bias; the next-sentence head is a
    dense layer on the pooled ``[CLS]`` output.

    Loss of one micro-batch ``b`` of an optimizer step of ``k`` micro-batches (``k = 1`` without
    gradient accumulation), with ``w`` the masked-LM weights (0 at padded predictions) and
    ``v`` the next-sentence weights, the sums over all replicas:

        loss_b = k * sum_b(w * CE(masked_lm)) / sum_step(w)
               + sum_b(v * CE(next_sentence)) / sum_b(v)

    The optimizer averages the k micro-batch gradients, so the step follows the gradient of
    ``sum_step(w * CE) / sum_step(w)``: exactly the loss of the whole step's batch, however
    unequally its masked tokens fall over micro-batches and replicas (a per-micro-batch
    normalization weighs a token of a micro-batch with few masked tokens more; the
    next-sentence weights are all ones, so every micro-batch holds the same count).
    ``k / sum_step(w)`` comes from the batch: the sum over the micro-batch of
    ``sample_weights["masked_lm_step_share"]`` that `input_pipeline.make_pretraining_dataset`
    writes; a batch without it (one that is its own step) uses ``1 / sum_b(w)``.

    Under a tf.distribute strategy each replica returns its share, its local sums over the
    global denominators, so that the gradients summed over replicas are those of one device
    with the global batch (Keras's default divides each replica's mean by the replica count,
    which equals this only when every replica holds the same number of masked tokens).

    Metrics (reset with the others at each epoch): ``masked_lm_loss``, ``next_sentence_loss``,
    ``masked_lm_accuracy`` (weighted by ``w``) and ``next_sentence_accuracy``.

    Args:
        backbone: a `keras_hub.models.BertBackbone`; its dtype policy is used by the heads.
    """

    def __init__(self, backbone, **kwargs):
        inputs = {
            name: keras.Input(shape=(None,), dtype="int32", name=name) for name in FEATURE_NAMES
        }
        outputs = backbone({name: inputs[name] for name in FEATURE_NAMES[:3]})
        initializer = keras.initializers.TruncatedNormal(stddev=0.02)
        masked_lm_head = keras_hub.layers.MaskedLMHead(
            vocabulary_size=backbone.vocabulary_size,
            token_embedding=backbone.token_embedding,
            intermediate_activation="gelu",
            kernel_initializer=initializer,
            dtype=backbone.dtype_policy,
            name="mlm_head",
        )
        next_sentence_head = keras.layers.Dense(
            2, kernel_initializer=initializer, dtype=backbone.dtype_policy, name="nsp_head"
        )
        # Logits in float32 under mixed precision: the softmax over the vocabulary and the loss
        # lose too much in float16/bfloat16.
        masked_lm = keras.layers.Activation("linear", dtype="float32", name="masked_lm")(
            masked_lm_head(outputs["sequence_output"], mask_positions=inputs["mask_positions"])
        )
        next_sentence = keras.layers.Activation("linear", dtype="float32", name="next_sentence")(
            next_sentence_head(outputs["pooled_output"])
        )
        super().__init__(
            inputs=inputs,
            outputs={"masked_lm": masked_lm, "next_sentence": next_sentence},
            **kwargs,
        )
        self.backbone = backbone
        self.masked_lm_loss_tracker = keras.metrics.Mean(name="masked_lm_loss")
        self.next_sentence_loss_tracker = keras.metrics.Mean(name="next_sentence_loss")
        self.masked_lm_accuracy = keras.metrics.SparseCategoricalAccuracy(name="masked_lm_accuracy")
        self.next_sentence_accuracy = keras.metrics.SparseCategoricalAccuracy(
            name="next_sentence_accuracy"
        )

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        masked_lm_weights = ops.cast(sample_weight["masked_lm"], "float32")
        next_sentence_weights = ops.cast(sample_weight["next_sentence"], "float32")
        masked_lm_losses = keras.losses.sparse_categorical_crossentropy(
            y["masked_lm"], y_pred["masked_lm"], from_logits=True
        )
        next_sentence_losses = keras.losses.sparse_categorical_crossentropy(
            y["next_sentence"], y_pred["next_sentence"], from_logits=True
        )
        step_share = sample_weight.get("masked_lm_step_share")
        masked_lm_loss = ops.sum(masked_lm_losses * masked_lm_weights) / _global_sum(
            masked_lm_weights if step_share is None else ops.cast(step_share, "float32")
        )
        next_sentence_loss = ops.sum(next_sentence_losses * next_sentence_weights) / _global_sum(
            next_sentence_weights
        )
        # The trackers average over replicas; each replica's share times the replica count
        # averages to the global value (and, over a step's k micro-batches, to the step's).
        replicas = _num_replicas()
        self.masked_lm_loss_tracker.update_state(masked_lm_loss * replicas)
        self.next_sentence_loss_tracker.update_state(next_sentence_loss * replicas)
        self.masked_lm_accuracy.update_state(
            y["masked_lm"], y_pred["masked_lm"], sample_weight=masked_lm_weights
        )
        self.next_sentence_accuracy.update_state(
            y["next_sentence"], y_pred["next_sentence"], sample_weight=next_sentence_weights
        )
        return masked_lm_loss + next_sentence_loss


def _num_replicas():
    if keras.backend.backend() != "tensorflow":
        return 1
    import tensorflow as tf

    context = tf.distribute.get_replica_context()
    return 1 if context is None else context.num_replicas_in_sync


def _global_sum(values):
    """``sum(values)`` over the global batch: all-reduced over tf.distribute replicas.

    On JAX and PyTorch Keras computes on the global batch already. The denominator is data, not
    a function of the weights, so no gradient flows through it; it is at least 1e-5 so that a
    batch without any masked token gives a loss of 0, not NaN (google-research/bert's guard).
    """
    total = ops.sum(values)
    if _num_replicas() > 1:
        import tensorflow as tf

        total = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, total)
    return ops.maximum(ops.stop_gradient(total), 1e-5)
