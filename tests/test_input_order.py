"""The training order of keras_largebatch.input_order: a function of (seed, epoch), positioned
at any example without replaying the stream.

The references are independent of the module: a stream started at 0 (its first epoch read
through the positioning code with nothing to skip, the later ones through the in-graph epoch
code), and a plain-Python simulation of a round-robin interleave.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from keras_largebatch import input_order

# Uneven files, one of them empty and one of a single record.
COUNTS = [5, 9, 1, 7, 3, 0, 4]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    directory = tmp_path_factory.mktemp("records")
    paths = []
    for index, count in enumerate(COUNTS):
        path = str(directory / f"part-{index}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for record in range(count):
                writer.write(f"{index}-{record}".encode())
        paths.append(path)
    return paths


def _records(files, start, count, seed=7, cycle_length=3, window_size=4, read_file=None):
    stream = input_order.shuffled_records(
        files, COUNTS, seed, start, cycle_length, window_size, read_file=read_file
    )
    return [
        (record.decode(), int(epoch)) for record, epoch in stream.take(count).as_numpy_iterator()
    ]


def test_records_are_counted(files):
    assert input_order.count_records(files) == COUNTS


@pytest.mark.parametrize("cycle_length, window_size", [(3, 4), (1, 100), (7, 3)])
def test_a_record_stream_started_anywhere_continues_the_stream_from_0(
    files, cycle_length, window_size
):
    epoch_size = sum(COUNTS)
    reference = _records(files, 0, 3 * epoch_size, 7, cycle_length, window_size)
    for start in range(0, 2 * epoch_size + 1, 5):
        assert (
            _records(files, start, 8, 7, cycle_length, window_size)
            == (reference[start : start + 8])
        ), start


def test_every_epoch_reads_every_record_once_in_a_new_order(files):
    epoch_size = sum(COUNTS)
    stream = _records(files, 0, 3 * epoch_size)
    everything = sorted(f"{i}-{r}" for i, count in enumerate(COUNTS) for r in range(count))
    orders = []
    for epoch in range(3):
        records = stream[epoch * epoch_size : (epoch + 1) * epoch_size]
        assert {e for _, e in records} == {epoch}
        assert sorted(record for record, _ in records) == everything
        orders.append([record for record, _ in records])
    assert len({tuple(order) for order in orders}) == 3
    assert _records(files, 0, epoch_size, seed=8) != stream[:epoch_size]


def test_a_late_epoch_is_reached_without_reading_the_epochs_before(files):
    epoch_size = sum(COUNTS)
    start = 1_000_000 * epoch_size + 11
    late = _records(files, start, epoch_size)
    assert {epoch for _, epoch in late} <= {1_000_000, 1_000_001}
    # The same stream, as positioned one epoch earlier.
    assert _records(files, start - epoch_size, 2 * epoch_size)[epoch_size:] == late


def test_a_resume_reads_at_most_one_group_of_files_and_one_window_before_its_position(
    tmp_path,
):
    # 8 files of 1,000 records; 2 read at a time; windows of 50. A resume at a late position
    # (a million epochs in, 1,234 records into the epoch) reads only records of the group of
    # files its window starts in, not the records before it in the stream.
    counts = [1000] * 8
    paths = []
    for index, count in enumerate(counts):
        path = str(tmp_path / f"big-{index}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for record in range(count):
                writer.write(f"{index}-{record}".encode())
        paths.append(path)
    read = []

    def counting_reader(path):
        def count(record):
            read.append(1)
            return record

        return tf.data.TFRecordDataset(path).map(
            lambda record: tf.py_function(count, [record], tf.string)
        )

    def first(start, take=10):
        read.clear()
        stream = input_order.shuffled_records(
            paths, counts, 3, start, cycle_length=2, window_size=50, read_file=counting_reader
        )
        return [record for record, _ in stream.take(take).as_numpy_iterator()], len(read)

    epoch_size = sum(counts)
    # Before the position: the group's 1,200 records up to its window, and 34 of the window;
    # then that window, the next one (read ahead while the first is consumed) and what the
    # interleave reads ahead (a few per file). Replaying would read 8e9 records.
    bound = 2 * 1000 + 2 * 50 + 64
    _, reads = first(1_000_000 * epoch_size + 1234)
    assert reads <= bound, reads
    # No more than a start 1,234 records into the first epoch reads: the epochs trained
    # before cost nothing.
    _, early_reads = first(1234)
    assert early_reads <= bound, early_reads


def _interleaved(counts):
    """A plain round-robin over files of ``counts`` records: (file, record) in order."""
    order, taken = [], [0] * len(counts)
    while len(order) < sum(counts):
        for file, count in enumerate(counts):
            if taken[file] < count:
                order.append((file, taken[file]))
                taken[file] += 1
    return order


def test_the_start_of_a_group_matches_a_round_robin_read():
    random = np.random.default_rng(0)
    for _ in range(200):
        cycle_length = int(random.integers(1, 5))
        counts = [int(n) for n in random.integers(0, 6, size=int(random.integers(1, 9)))]
        if not sum(counts):
            continue
        position = int(random.integers(0, sum(counts)))
        group, pairs = input_order._group_start(counts, cycle_length, position)
        group_counts = counts[group * cycle_length : (group + 1) * cycle_length]
        before = sum(counts[: group * cycle_length])
        expected = _interleaved(group_counts)[position - before :]
        # Read the group as the positioned interleave does: each file from its skip, round
        # robin in the returned cycle order.
        cycle = [(file, skip) for file, skip in pairs]
        got, taken = [], {file: skip for file, skip in cycle}
        while len(got) < len(expected):
            for file, _ in cycle:
                if taken[file] < group_counts[file]:
                    got.append((file, taken[file]))
                    taken[file] += 1
        assert got == expected, (counts, cycle_length, position)


def test_an_index_stream_started_anywhere_continues_the_stream_from_0():
    def indices(start, count):
        stream = input_order.shuffled_indices(10, 3, start)
        return [(int(index), int(epoch)) for index, epoch in stream.take(count).as_numpy_iterator()]

    reference = indices(0, 40)
    for epoch in range(4):
        assert sorted(i for i, _ in reference[epoch * 10 : (epoch + 1) * 10]) == list(range(10))
    assert len({tuple(reference[e * 10 : (e + 1) * 10]) for e in range(4)}) == 4
    for start in range(30):
        assert indices(start, 10) == reference[start : start + 10]


def test_epochs_far_apart_and_seeds_far_apart_draw_different_orders():
    # index_shuffle reads only the low bits of its seed; these orders must still differ.
    base = input_order.epoch_permutation(1000, 5, 0).numpy()
    for epoch, seed in ((256, 5), (2**20, 5), (0, 5 + 2**8), (0, 5 + 2**40)):
        other = input_order.epoch_permutation(1000, seed, epoch).numpy()
        assert (other != base).mean() > 0.9, (epoch, seed)


def test_files_that_do_not_divide_over_the_pipelines_are_refused():
    assert input_order.pipeline_files(list("abcdef"), 3, 1) == ["b", "e"]
    with pytest.raises(ValueError, match=r"7 training file\(s\) do not divide evenly over 2 input"):
        input_order.pipeline_files(list("abcdefg"), 2, 0)


def test_record_counts_come_from_the_cache_then_reading(files, tmp_path):
    cache = str(tmp_path / "record_counts.json")
    counts = input_order.RecordCounts(cache)
    assert counts(files) == COUNTS
    with open(cache) as stream:
        cached = json.load(stream)
    assert [cached[path]["records"] for path in files] == COUNTS

    # A second run reads the cache and no file: a counter that would fail if called.
    reused = input_order.RecordCounts(cache)
    reused_count = input_order.count_records
    try:
        input_order.count_records = lambda paths: pytest.fail(f"counted {paths}")
        assert reused(files) == COUNTS
    finally:
        input_order.count_records = reused_count

    # A file whose size changed is counted again.
    with tf.io.TFRecordWriter(files[5]) as writer:
        writer.write(b"5-0")
    try:
        assert input_order.RecordCounts(cache)(files)[5] == 1
    finally:
        open(files[5], "wb").close()
    assert input_order.RecordCounts(cache)(files)[5] == 0

    # A process that does not write leaves no cache.
    silent = input_order.RecordCounts(str(tmp_path / "other.json"), writes=False)
    assert silent(files) == COUNTS
    assert not os.path.exists(tmp_path / "other.json")
