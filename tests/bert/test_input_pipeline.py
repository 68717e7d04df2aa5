"""The input pipeline against records written by hand, field by field, with tf.train.Example."""

import re

import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch.bert.data import vocab as vocab_lib
from keras_largebatch.bert.pretraining import input_pipeline
from tests.support.bert_records import write_records

SEQ_LENGTH = 16
MAX_PREDICTIONS = 4
CLS, SEP, MASK = 2, 3, 4
# Specials, then 40 words: ids 5..44.
VOCABULARY = list(vocab_lib.SPECIAL_TOKENS) + [f"word{index}" for index in range(40)]


def _int64(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))


def _float(values):
    return tf.train.Feature(float_list=tf.train.FloatList(value=[float(v) for v in values]))


def _hand_record(
    example_id,
    rng,
    names=("input_ids", "segment_ids"),
    masked=True,
    seq_length=SEQ_LENGTH,
    max_predictions=MAX_PREDICTIONS,
):
    """A record with random content; ``input_ids[1] = example_id`` so it can be traced."""
    length = int(rng.integers(6, seq_length + 1))
    input_ids = np.zeros(seq_length, np.int64)
    input_ids[:length] = rng.integers(5, len(VOCABULARY), length)
    input_ids[1] = example_id
    length_a = int(rng.integers(1, length - 3))
    input_ids[0], input_ids[length_a + 1], input_ids[length - 1] = CLS, SEP, SEP
    segment_ids = np.zeros(seq_length, np.int64)
    segment_ids[length_a + 2 : length] = 1
    values = {
        names[0]: input_ids,
        "input_mask": (np.arange(seq_length) < length).astype(np.int64),
        names[1]: segment_ids,
        "next_sentence_labels": np.array([rng.integers(0, 2)]),
    }
    feature = {name: _int64(value) for name, value in values.items()}
    if masked:
        candidates = [position for position in range(1, length - 1) if position != length_a + 1]
        count = min(int(rng.integers(1, max_predictions + 1)), len(candidates))
        positions = np.zeros(max_predictions, np.int64)
        positions[:count] = np.sort(rng.choice(candidates, count, replace=False))
        values["masked_lm_positions"] = positions
        values["masked_lm_ids"] = np.where(
            np.arange(max_predictions) < count, rng.integers(5, len(VOCABULARY), max_predictions), 0
        )
        values["masked_lm_weights"] = (np.arange(max_predictions) < count).astype(np.float32)
        feature["masked_lm_positions"] = _int64(values["masked_lm_positions"])
        feature["masked_lm_ids"] = _int64(values["masked_lm_ids"])
        feature["masked_lm_weights"] = _float(values["masked_lm_weights"])
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString(deterministic=True), values


def _write(path, records):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for serialized, _ in records:
            writer.write(serialized)
    return str(path)


def _write_files(directory, num_files, per_file, seed=0, **kwargs):
    rng = np.random.default_rng(seed)
    files, values = [], []
    for file_index in range(num_files):
        records = [
            _hand_record(1000 + file_index * per_file + index, rng, **kwargs)
            for index in range(per_file)
        ]
        files.append(_write(directory / f"data-{file_index}.tfrecord", records))
        values.extend(value for _, value in records)
    return files, values


@pytest.mark.parametrize(
    "names", [("input_ids", "segment_ids"), ("input_word_ids", "input_type_ids")]
)
def test_reads_hand_written_records_exactly(tmp_path, names):
    files, expected = _write_files(tmp_path, num_files=2, per_file=3, names=names)
    dataset = input_pipeline.make_pretraining_dataset(
        files, SEQ_LENGTH, MAX_PREDICTIONS, batch_size_per_replica=2, is_training=False
    )
    batches = list(dataset)
    assert len(batches) == 3
    features, labels, weights = (
        {key: np.concatenate([batch[part][key] for batch in batches]) for key in batches[0][part]}
        for part in range(3)
    )
    reference = {key: np.stack([value[key] for value in expected]) for key in expected[0]}
    np.testing.assert_array_equal(features["token_ids"], reference[names[0]])
    np.testing.assert_array_equal(features["segment_ids"], reference[names[1]])
    np.testing.assert_array_equal(features["padding_mask"], reference["input_mask"])
    np.testing.assert_array_equal(features["mask_positions"], reference["masked_lm_positions"])
    np.testing.assert_array_equal(labels["masked_lm"], reference["masked_lm_ids"])
    np.testing.assert_array_equal(labels["next_sentence"], reference["next_sentence_labels"][:, 0])
    np.testing.assert_array_equal(weights["masked_lm"], reference["masked_lm_weights"])
    np.testing.assert_array_equal(weights["next_sentence"], np.ones(6))
    spec = dataset.element_spec
    shapes = {
        "token_ids": [2, SEQ_LENGTH],
        "segment_ids": [2, SEQ_LENGTH],
        "padding_mask": [2, SEQ_LENGTH],
        "mask_positions": [2, MAX_PREDICTIONS],
    }
    assert {key: value.shape.as_list() for key, value in spec[0].items()} == shapes
    assert {key: value.dtype for key, value in spec[0].items()} == dict.fromkeys(shapes, tf.int32)
    assert spec[1]["masked_lm"].shape.as_list() == [2, MAX_PREDICTIONS]
    assert spec[1]["masked_lm"].dtype == spec[1]["next_sentence"].dtype == tf.int32
    assert spec[1]["next_sentence"].shape.as_list() == [2]
    assert spec[2]["masked_lm"].dtype == spec[2]["next_sentence"].dtype == tf.float32


def test_training_drops_the_partial_batch_and_repeats(tmp_path):
    files, expected = _write_files(tmp_path, num_files=1, per_file=5)
    dataset = input_pipeline.make_pretraining_dataset(
        files, SEQ_LENGTH, MAX_PREDICTIONS, batch_size_per_replica=2, seed=3
    )
    ids = [batch[0]["token_ids"][:, 1].numpy() for batch in dataset.take(10)]
    assert all(batch.shape == (2,) for batch in ids)
    assert set(np.concatenate(ids)) == {value["input_ids"][1] for value in expected}
    eval_dataset = input_pipeline.make_pretraining_dataset(
        files, SEQ_LENGTH, MAX_PREDICTIONS, batch_size_per_replica=2, is_training=False
    )
    assert len(list(eval_dataset)) == 2


def test_every_batch_carries_its_steps_masked_count(tmp_path):
    # 3 batches per step: the first example of each batch holds a third of the 3 batches'
    # summed masked_lm weights, the others 0; the stream from batch 3 is the stream's step 2.
    files = [write_records(tmp_path / "varied.tfrecord", 64, seed=1)]

    def batches(start_batch):
        dataset = input_pipeline.make_pretraining_dataset(
            files, 16, 4, 2, seed=3, batches_per_step=3, start_batch=start_batch
        )
        return [weights for _, _, weights in dataset.take(6).as_numpy_iterator()]

    stream = batches(0)
    for step in (stream[:3], stream[3:]):
        total = sum(batch["masked_lm"].sum() for batch in step)
        for batch in step:
            np.testing.assert_allclose(batch["masked_lm_step_share"], [total / 3, 0.0], rtol=1e-6)
    assert len({float(batch["masked_lm"].sum()) for batch in stream}) > 1
    np.testing.assert_array_equal(
        batches(3)[0]["masked_lm_step_share"], stream[3]["masked_lm_step_share"]
    )
    with pytest.raises(ValueError, match="start_batch=4 must be a multiple of batches_per_step=3"):
        input_pipeline.make_pretraining_dataset(files, 16, 4, 2, batches_per_step=3, start_batch=4)


@pytest.mark.parametrize("num_files", [4, 2])
def test_input_pipelines_read_disjoint_examples(tmp_path, num_files):
    # Training shards by file: 2 or 1 of them per pipeline.
    files, expected = _write_files(tmp_path, num_files=num_files, per_file=24 // num_files)
    seen = []
    for pipeline_id in range(2):
        context = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=pipeline_id, num_replicas_in_sync=2
        )
        dataset = input_pipeline.make_pretraining_dataset(
            files,
            SEQ_LENGTH,
            MAX_PREDICTIONS,
            batch_size_per_replica=2,
            input_context=context,
            seed=1,
        )
        # 6 batches of 2 are one pass over the pipeline's 12 examples, each read once.
        tokens = [
            int(token)
            for features, _, _ in dataset.take(6)
            for token in features["token_ids"][:, 1]
        ]
        assert len(set(tokens)) == 12
        seen.append(set(tokens))
    assert len(seen[0]) == len(seen[1]) == 12 and not seen[0] & seen[1]
    assert seen[0] | seen[1] == {value["input_ids"][1] for value in expected}


def test_training_starts_at_any_batch_as_the_stream_from_0_continues(tmp_path):
    files, _ = _write_files(
        tmp_path, num_files=2, per_file=7, masked=False, seq_length=64, max_predictions=8
    )

    def batches(start_batch, take):
        dataset = input_pipeline.make_pretraining_dataset(
            files,
            64,
            8,
            batch_size_per_replica=3,
            seed=4,
            shuffle_buffer_size=5,
            dynamic_masking=True,
            vocabulary=VOCABULARY,
            start_batch=start_batch,
        )
        return [
            np.concatenate([features["token_ids"], features["mask_positions"]], axis=1)
            for features, _, _ in dataset.take(take).as_numpy_iterator()
        ]

    reference = batches(0, 12)  # 36 examples: more than two passes over the 14
    for start in (1, 4, 5, 9):
        for got, expected in zip(batches(start, 3), reference[start:]):
            np.testing.assert_array_equal(got, expected)


def test_training_files_must_divide_over_the_pipelines_evaluation_shards_records(tmp_path):
    files, expected = _write_files(tmp_path, num_files=1, per_file=6)
    context = tf.distribute.InputContext(2, 1, 2)
    with pytest.raises(ValueError, match=r"1 training file\(s\) do not divide evenly over 2"):
        input_pipeline.make_pretraining_dataset(
            files, SEQ_LENGTH, MAX_PREDICTIONS, 1, input_context=context
        )
    evaluation = input_pipeline.make_pretraining_dataset(
        files, SEQ_LENGTH, MAX_PREDICTIONS, 1, is_training=False, input_context=context
    )
    assert [int(f["token_ids"][0, 1]) for f, _, _ in evaluation] == [
        value["input_ids"][1] for value in expected[1::2]
    ]


def test_mirrored_strategy_gives_replicas_disjoint_static_batches(tmp_path):
    files, expected = _write_files(tmp_path, num_files=4, per_file=6)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    distributed = strategy.distribute_datasets_from_function(
        lambda context: input_pipeline.make_pretraining_dataset(
            files,
            SEQ_LENGTH,
            MAX_PREDICTIONS,
            batch_size_per_replica=context.get_per_replica_batch_size(4),
            is_training=False,
            input_context=context,
        )
    )
    seen = []
    for features, labels, weights in distributed:
        per_replica = [
            tokens[:, 1].numpy().tolist()
            for tokens in strategy.experimental_local_results(features["token_ids"])
        ]
        for positions in strategy.experimental_local_results(features["mask_positions"]):
            assert positions.shape == (2, MAX_PREDICTIONS)
        assert [
            tokens.shape for tokens in strategy.experimental_local_results(features["token_ids"])
        ] == [(2, SEQ_LENGTH)] * 2
        assert not set(per_replica[0]) & set(per_replica[1])
        seen.extend(per_replica[0] + per_replica[1])
    assert sorted(seen) == sorted(value["input_ids"][1] for value in expected)


def test_dynamic_masking(tmp_path):
    files, expected = _write_files(
        tmp_path, num_files=2, per_file=50, masked=False, seq_length=64, max_predictions=8
    )
    dataset = input_pipeline.make_pretraining_dataset(
        files,
        64,
        8,
        batch_size_per_replica=25,
        is_training=False,
        seed=5,
        dynamic_masking=True,
        vocabulary=VOCABULARY,
    )
    outcomes = {"mask": 0, "kept": 0, "random": 0}
    passes = []
    for _ in range(6):
        pass_positions = []
        # Evaluation reads in file order, so example i of the pass is expected[i].
        batches = list(dataset)
        tokens, positions, original_ids, weights = (
            np.concatenate([part[key].numpy() for part in parts])
            for parts, key in (
                ([b[0] for b in batches], "token_ids"),
                ([b[0] for b in batches], "mask_positions"),
                ([b[1] for b in batches], "masked_lm"),
                ([b[2] for b in batches], "masked_lm"),
            )
        )
        for index, record in enumerate(expected):
            count = int(weights[index].sum())
            assert count == min(8, max(1, round(int(record["input_mask"].sum()) * 0.15)))
            chosen = positions[index][:count]
            np.testing.assert_array_equal(positions[index][count:], 0)
            np.testing.assert_array_equal(original_ids[index][count:], 0)
            assert np.all(np.diff(chosen) > 0)
            assert np.all(record["input_ids"][chosen] > MASK), "a special or padding position"
            np.testing.assert_array_equal(original_ids[index][:count], record["input_ids"][chosen])
            untouched = np.setdiff1d(np.arange(64), chosen)
            np.testing.assert_array_equal(tokens[index][untouched], record["input_ids"][untouched])
            new, old = tokens[index][chosen], record["input_ids"][chosen]
            assert np.all((new == MASK) | (new > MASK)), "replaced by a special token"
            outcomes["mask"] += int((new == MASK).sum())
            outcomes["kept"] += int((new == old).sum())
            outcomes["random"] += int(((new != MASK) & (new != old)).sum())
            pass_positions.append(tuple(chosen))
        passes.append(pass_positions)
    # Fresh masks every pass: most examples get other positions in the next pass.
    changed = sum(first != second for first, second in zip(passes[0], passes[1]))
    assert changed > 0.8 * len(expected)
    total = sum(outcomes.values())
    assert total > 2500, total
    # A random replacement equals the original with probability 1/40, counted as "kept".
    for outcome, probability in (
        ("mask", 0.8),
        ("kept", 0.1 + 0.1 / 40),
        ("random", 0.1 - 0.1 / 40),
    ):
        tolerance = 4 * np.sqrt(probability * (1 - probability) / total)
        assert abs(outcomes[outcome] / total - probability) < tolerance, (outcome, outcomes)


def test_error_when_no_file_matches(tmp_path):
    pattern = str(tmp_path / "missing-*.tfrecord")
    with pytest.raises(
        ValueError, match=re.escape(f"record file pattern '{pattern}' matches no file")
    ):
        input_pipeline.make_pretraining_dataset(pattern, SEQ_LENGTH, MAX_PREDICTIONS, 2)


def test_error_when_max_predictions_exceeds_seq_length(tmp_path):
    files, _ = _write_files(tmp_path, num_files=1, per_file=1)
    with pytest.raises(
        ValueError, match=r"max_predictions_per_seq must be in \[1, seq_length=16\], got 17"
    ):
        input_pipeline.make_pretraining_dataset(files, SEQ_LENGTH, 17, 2)


def test_error_when_a_feature_is_missing(tmp_path):
    serialized, _ = _hand_record(7, np.random.default_rng(0))
    example = tf.train.Example.FromString(serialized)
    del example.features.feature["masked_lm_weights"]
    good, _ = _write_files(tmp_path, num_files=1, per_file=1)
    bad = _write(tmp_path / "bad.tfrecord", [(example.SerializeToString(deterministic=True), None)])
    with pytest.raises(ValueError, match=f"record file '{bad}' lacks feature 'masked_lm_weights'"):
        input_pipeline.make_pretraining_dataset(good + [bad], SEQ_LENGTH, MAX_PREDICTIONS, 2)


def test_error_when_a_feature_has_the_wrong_length(tmp_path):
    files, _ = _write_files(tmp_path, num_files=1, per_file=1)
    with pytest.raises(
        ValueError,
        match=f"record file '{files[0]}': feature 'input_ids' has 16 "
        r"values, expected 32 \(seq_length=32\)",
    ):
        input_pipeline.make_pretraining_dataset(files, 32, MAX_PREDICTIONS, 2)
    with pytest.raises(
        ValueError,
        match=f"record file '{files[0]}': feature 'masked_lm_positions' "
        r"has 4 values, expected 5 \(max_predictions_per_seq=5\)",
    ):
        input_pipeline.make_pretraining_dataset(files, SEQ_LENGTH, 5, 2)


def test_error_for_empty_file_and_masking_variant_mismatch(tmp_path):
    empty = _write(tmp_path / "empty.tfrecord", [])
    with pytest.raises(ValueError, match=f"record file '{empty}' contains no records"):
        input_pipeline.make_pretraining_dataset(empty, SEQ_LENGTH, MAX_PREDICTIONS, 2)
    masked, _ = _write_files(tmp_path, num_files=1, per_file=1)
    with pytest.raises(
        ValueError, match="holds masked records.*dynamic_masking=True needs unmasked"
    ):
        input_pipeline.make_pretraining_dataset(
            masked, SEQ_LENGTH, MAX_PREDICTIONS, 2, dynamic_masking=True, vocabulary=VOCABULARY
        )
    with pytest.raises(ValueError, match="dynamic_masking=True needs vocabulary"):
        input_pipeline.make_pretraining_dataset(
            masked, SEQ_LENGTH, MAX_PREDICTIONS, 2, dynamic_masking=True
        )
    (tmp_path / "unmasked").mkdir()
    unmasked, _ = _write_files(tmp_path / "unmasked", num_files=1, per_file=1, masked=False)
    with pytest.raises(ValueError, match="lacks masked_lm_positions.*pass dynamic_masking=True"):
        input_pipeline.make_pretraining_dataset(unmasked, SEQ_LENGTH, MAX_PREDICTIONS, 2)


def test_error_when_files_spell_features_differently(tmp_path):
    rng = np.random.default_rng(0)
    google = _write(tmp_path / "a.tfrecord", [_hand_record(1, rng)])
    garden = _write(
        tmp_path / "b.tfrecord", [_hand_record(2, rng, names=("input_word_ids", "input_type_ids"))]
    )
    with pytest.raises(
        ValueError,
        match=f"record file '{garden}' names its features "
        r"\('input_word_ids', 'input_type_ids'\)",
    ):
        input_pipeline.make_pretraining_dataset([google, garden], SEQ_LENGTH, MAX_PREDICTIONS, 2)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"seq_length": "16"}, "seq_length must be an integer, got '16' of type str"),
        ({"batch_size_per_replica": 2.0}, "batch_size_per_replica must be an integer, got 2.0"),
        ({"masked_lm_prob": "0.15"}, "masked_lm_prob must be a number, got '0.15' of type str"),
        ({"dynamic_masking": "yes"}, "dynamic_masking must be True or False, got 'yes'"),
        ({"file_patterns": 7}, "file_patterns must be a file pattern or a list of them, got 7"),
    ],
)
def test_error_for_an_argument_of_the_wrong_type(tmp_path, kwargs, message):
    files, _ = _write_files(tmp_path, num_files=1, per_file=1)
    arguments = dict(
        file_patterns=files,
        seq_length=SEQ_LENGTH,
        max_predictions_per_seq=MAX_PREDICTIONS,
        batch_size_per_replica=2,
    )
    with pytest.raises(TypeError, match=re.escape(message)):
        input_pipeline.make_pretraining_dataset(**{**arguments, **kwargs})


def test_comma_separated_patterns_name_each_file_once(tmp_path):
    files, _ = _write_files(tmp_path, num_files=2, per_file=1)
    comma_list = f"{files[1]},{tmp_path / 'data-*.tfrecord'}"
    assert input_pipeline.resolve_record_files(comma_list) == files


def test_dynamic_whole_word_masking_masks_whole_words(tmp_path):
    # Every third word of the vocabulary is a "##" continuation, so records hold words of
    # several tokens; a word is never masked in part.
    vocabulary = list(VOCABULARY)
    for index in range(5, len(vocabulary), 3):
        vocabulary[index] = f"##{vocabulary[index]}"
    files, expected = _write_files(
        tmp_path, num_files=1, per_file=40, masked=False, seq_length=64, max_predictions=8
    )
    with pytest.raises(ValueError, match="whole_word_mask=True masks in the pipeline"):
        input_pipeline.make_pretraining_dataset(files, 64, 8, 20, whole_word_mask=True)
    dataset = input_pipeline.make_pretraining_dataset(
        files,
        64,
        8,
        batch_size_per_replica=20,
        is_training=False,
        seed=5,
        dynamic_masking=True,
        vocabulary=vocabulary,
        whole_word_mask=True,
    )
    continuation_ids = [index for index, token in enumerate(vocabulary) if token.startswith("##")]
    masked_continuations = 0
    for batch_index, (features, _, weights) in enumerate(dataset):
        for row in range(20):
            ids = expected[batch_index * 20 + row]["input_ids"]
            chosen = np.zeros(64, bool)
            chosen[features["mask_positions"][row].numpy()[weights["masked_lm"][row] > 0]] = True
            inside_word = np.isin(ids[1:], continuation_ids) & (ids[:-1] > MASK)
            assert not np.any(inside_word & (chosen[1:] != chosen[:-1])), row
            masked_continuations += int(np.sum(inside_word & chosen[1:]))
    assert masked_continuations > 0
