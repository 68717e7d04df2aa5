"""Training input in an order that is a function of (seed, epoch), positioned in constant time.

A resumed run must read what an uninterrupted one would from the step it resumes at. Replaying
the input to get there (``dataset.skip(steps * batch)``) costs time in proportion to the steps
trained: hours of reading after a preemption near the end of a long phase. Here the order of
every epoch is computed, not replayed, so the stream can start at any example:

* `shuffled_indices`: in-memory data. Epoch ``e`` is a permutation of the example indices drawn
  from ``(seed, e)`` by `tf.random.experimental.stateless_shuffle`; position ``n`` of the stream is
  epoch ``n // N``, index ``n % N`` of that permutation.
* `shuffled_records`: TFRecord files. Epoch ``e`` orders the files by a permutation drawn from
  ``(seed, e)``; groups of ``cycle_length`` consecutive files are read together, interleaved
  one record at a time (in parallel, in a fixed order); and each window of ``window_size``
  records of the epoch is permuted, from ``(seed, e, window)``. The records of each file
  (`RecordCounts`) locate where a position falls: its window, its group, and how far into each
  of the group's files. Starting there reads, before the position, at most the records of one
  group of files that precede it and the earlier records of its window, whatever the step.

The shuffle matches a shuffle buffer of ``window_size`` records over ``cycle_length`` files read
at once (each window is a uniform permutation, not a buffer's biased one), and every epoch
draws new file orders and windows. Two streams with the same arguments are equal element for
element, so a run that resumes at step ``S`` sees exactly what an uninterrupted run sees there.

Each element carries its epoch, for what a recipe draws per example and epoch (image crops,
dynamic masks): ``(index, epoch)`` or ``(serialized_record, epoch)``, both int64 but the record.
"""

import json

import tensorflow as tf

from keras_largebatch import _files

# The run directory's cache of record counts (`RecordCounts`).
RECORD_COUNTS_FILENAME = "record_counts.json"
# Windows of an epoch are numbered below this, so that (epoch, window) is one int64 of a seed.
_WINDOWS_PER_EPOCH = 2**20
# The end of an endless range of epochs.
_LAST_EPOCH = 2**40
# Spreads a seed over the phases of a run.
_PHASE_STRIDE = 1_000_003


def phase_seed(seed, phase_index):
    """The input seed of phase ``phase_index`` of a run seeded with ``seed``: its phases (which
    may read the same files) get different orders."""
    return int(seed) * _PHASE_STRIDE + int(phase_index)


def pipeline_files(files, num_pipelines, pipeline_id):
    """The training files of input pipeline ``pipeline_id`` of ``num_pipelines``: every
    ``num_pipelines``-th one, so that each pipeline reads only its own.

    Raises:
        ValueError: the files do not divide evenly over the pipelines (their shares, and so
            their epochs, would differ in length), naming both counts.
    """
    if len(files) % num_pipelines:
        raise ValueError(
            f"{len(files)} training file(s) do not divide evenly over {num_pipelines} input "
            f"pipelines (one per host or worker, or strategy.input_pipelines), each of which "
            f"reads its own files; use a multiple of {num_pipelines} files (split or merge "
            "the record files), or another number of pipelines"
        )
    return list(files[pipeline_id::num_pipelines])


def epoch_position(start, epoch_size):
    """``(epoch, offset)`` of example ``start`` of an endless stream of epochs of
    ``epoch_size`` examples."""
    if epoch_size < 1:
        raise ValueError(f"an epoch of {epoch_size} examples cannot be positioned in")
    return divmod(int(start), int(epoch_size))


def epoch_permutation(size, seed, epoch, part=0):
    """The permutation of ``range(size)`` that epoch ``epoch`` of ``seed`` draws for ``part``
    (0: the epoch's example or file order; ``w + 1``: window ``w``), as an int64 tensor. Works
    on Python ints and on tensors (inside a `tf.data` function)."""
    size = tf.cast(size, tf.int64)
    key = tf.stack(
        [
            tf.cast(seed, tf.int64),
            tf.cast(epoch, tf.int64) * _WINDOWS_PER_EPOCH + tf.cast(part, tf.int64),
        ]
    )
    # Not index_shuffle: it reads only the low 8 bits of each seed word (TF 2.21), so epochs
    # 256 apart, or seeds that differ above bit 8, would repeat one order.
    return tf.random.experimental.stateless_shuffle(tf.range(size), key)


def shuffled_indices(num_examples, seed, start=0):
    """The endless stream of ``(index, epoch)`` of ``num_examples`` in-memory examples, from
    position ``start``: every epoch a new permutation from ``(seed, epoch)``."""
    first_epoch, offset = epoch_position(start, num_examples)

    def epoch_indices(epoch):
        return tf.data.Dataset.from_tensor_slices(
            (epoch_permutation(num_examples, seed, epoch), tf.fill([num_examples], epoch))
        )

    first = epoch_indices(tf.constant(first_epoch, tf.int64)).skip(offset)
    rest = tf.data.Dataset.range(first_epoch + 1, _LAST_EPOCH).flat_map(epoch_indices)
    return first.concatenate(rest)


def shuffled_records(
    files,
    record_counts,
    seed,
    start=0,
    cycle_length=8,
    window_size=10000,
    read_file=None,
):
    """The endless stream of ``(serialized record, epoch)`` of ``files``, from position
    ``start`` (module docstring).

    Args:
        files: the record files of this input pipeline.
        record_counts: the records of each file (`RecordCounts`), in the same order.
        seed: an int; the same seed and files give the same stream.
        start: the position (records of this stream already consumed) to start at.
        cycle_length: files read at once, interleaved record by record.
        window_size: records of each permuted window (the shuffle's reach, and the most that are
            held in memory at once, twice over with prefetching).
        read_file: ``path -> tf.data.Dataset`` of its serialized records; default
            `tf.data.TFRecordDataset` with an 8 MiB read buffer.
    """
    files = [str(path) for path in files]
    counts = [int(count) for count in record_counts]
    if len(files) != len(counts) or not files:
        raise ValueError(
            f"shuffled_records needs one record count per file, got {len(files)} file(s) and "
            f"{len(counts)} count(s)"
        )
    if read_file is None:
        read_file = _read_tfrecords
    epoch_size = sum(counts)
    first_epoch, offset = epoch_position(start, epoch_size)
    cycle_length = min(int(cycle_length), len(files))
    window_size = int(window_size)

    def interleave(pairs):
        # pairs: (path, records to skip) of one group of files, in their cycle order.
        return pairs.interleave(
            lambda path, skip: read_file(path).skip(skip),
            cycle_length=cycle_length,
            block_length=1,
            num_parallel_calls=cycle_length,
            deterministic=True,
        )

    def windows(records, epoch, first_window, first_offset=0):
        # Each window of the epoch permuted by (seed, epoch, window); the stream starts at the
        # first record of window `first_window`, so the windows are those of the whole epoch,
        # and its first `first_offset` records are dropped as a slice. Whole windows are
        # permuted and unbatched, with their epochs: no function runs per record.
        def permute(window, batch):
            size = tf.shape(batch, out_type=tf.int64)[0]
            order = epoch_permutation(size, seed, epoch, window + 1)
            start = tf.where(window == first_window, tf.constant(first_offset, tf.int64), 0)
            return tf.gather(batch, order)[start:], tf.fill([size - start], epoch)

        epoch = tf.cast(epoch, tf.int64)
        # The next window is read and permuted while this one is consumed.
        windows = records.batch(window_size).enumerate(start=first_window).map(permute)
        return windows.prefetch(1).unbatch()

    def full_epoch(epoch):
        ordered = tf.gather(tf.constant(files), epoch_permutation(len(files), seed, epoch))
        groups = tf.data.Dataset.from_tensor_slices(ordered).batch(cycle_length)
        records = groups.flat_map(
            lambda group: interleave(
                tf.data.Dataset.from_tensor_slices((group, tf.zeros_like(group, dtype=tf.int64)))
            )
        )
        return windows(records, epoch, 0)

    # The first epoch, from the first record of the window that holds `offset`.
    order = epoch_permutation(len(files), seed, first_epoch).numpy().tolist()
    ordered_files = [files[index] for index in order]
    ordered_counts = [counts[index] for index in order]
    first_window, window_offset = divmod(offset, window_size)
    group, pairs = _group_start(ordered_counts, cycle_length, first_window * window_size)
    group_files = ordered_files[group * cycle_length : (group + 1) * cycle_length]
    records = interleave(
        tf.data.Dataset.from_tensor_slices(
            (
                tf.constant([group_files[i] for i, _ in pairs]),
                tf.constant([skip for _, skip in pairs], tf.int64),
            )
        )
    )
    later_files = ordered_files[(group + 1) * cycle_length :]
    if later_files:
        records = records.concatenate(
            tf.data.Dataset.from_tensor_slices(later_files)
            .batch(cycle_length)
            .flat_map(
                lambda group_paths: interleave(
                    tf.data.Dataset.from_tensor_slices(
                        (group_paths, tf.zeros_like(group_paths, dtype=tf.int64))
                    )
                )
            )
        )
    first = windows(records, first_epoch, first_window, window_offset)
    rest = tf.data.Dataset.range(first_epoch + 1, _LAST_EPOCH).flat_map(full_epoch)
    return first.concatenate(rest)


def _group_start(counts, cycle_length, position):
    """Where record ``position`` of an epoch falls when files of ``counts`` records are read in
    groups of ``cycle_length``, each interleaved one record per file in turn: ``(group,
    [(file of the group, records to skip), ...])``, the group's files in the cycle order that
    continues the interleave from there.

    Round ``r`` of a group's interleave takes record ``r`` of each file that has more than
    ``r`` records, in the group's order; so before round ``r`` the group has given
    ``sum(min(n, r))`` records. A position ``rem`` records into round ``r`` is reached by
    skipping ``r + 1`` records of the first ``rem`` files still open and ``r`` of the others
    (all of a file that has fewer), and starting the cycle at the first file not yet read in
    that round.
    """
    group_start = 0
    for group in range(0, len(counts), cycle_length):
        group_counts = counts[group : group + cycle_length]
        if position < group_start + sum(group_counts):
            break
        group_start += sum(group_counts)
    else:
        raise ValueError(f"position {position} is past the epoch's {sum(counts)} records")
    into = position - group_start
    # The largest round r whose start is at or before `into` (a binary search over rounds).
    low, high = 0, max(group_counts)
    while low < high:
        middle = (low + high + 1) // 2
        if sum(min(count, middle) for count in group_counts) <= into:
            low = middle
        else:
            high = middle - 1
    round_ = low
    remainder = into - sum(min(count, round_) for count in group_counts)
    open_files = [i for i, count in enumerate(group_counts) if count > round_]
    read_this_round = set(open_files[:remainder])
    skips = [min(count, round_ + (i in read_this_round)) for i, count in enumerate(group_counts)]
    first = open_files[remainder] if remainder < len(open_files) else 0
    cycle = list(range(first, len(group_counts))) + list(range(first))
    return group // cycle_length, [(i, skips[i]) for i in cycle]


def _read_tfrecords(path):
    # The TFRecord read buffer of the Cloud TPU reference: fewer, larger reads from network
    # storage.
    return tf.data.TFRecordDataset(path, buffer_size=8 * 1024 * 1024)


def count_records(files, cycle_length=16):
    """The records of each of ``files``, read once (in parallel)."""
    files = [str(path) for path in files]
    if not files:
        return []
    counts = (
        tf.data.Dataset.from_tensor_slices(files)
        .enumerate()
        .interleave(
            lambda index, path: _read_tfrecords(path).map(lambda _: index),
            cycle_length=min(cycle_length, len(files)),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=False,
        )
        .reduce(
            tf.zeros([len(files)], tf.int64),
            lambda totals, index: tf.tensor_scatter_nd_add(totals, [[index]], [1]),
        )
    )
    return [int(count) for count in counts.numpy()]


class RecordCounts:
    """The records of each input file, counted once per run.

    A file's count comes from the run's cache ``cache_file`` (kept for a file whose size is
    unchanged) or from reading it. (A recipe whose data says how many records each file holds
    answers from there first: `keras_largebatch.bert.data.manifest.manifests_first`.)
    Counts read are added to the cache when ``writes`` (only one process of a run writes it;
    the others count what the cache lacks at each start).

        counts = RecordCounts(os.path.join(output_dir, "record_counts.json"))
        counts(files)    # [records of files[0], ...]
    """

    def __init__(self, cache_file=None, writes=True):
        self.cache_file = cache_file
        self.writes = writes
        self._known = {}

    def __call__(self, files):
        files = [str(path) for path in files]
        missing = [path for path in files if self._lookup(path) is None]
        if missing:
            for path, count in zip(missing, count_records(missing)):
                self._known[path] = (count, _size(path))
            self._save()
        return [self._lookup(path) for path in files]

    def _lookup(self, path):
        if path not in self._known:
            entry = self._cached().get(path)
            if entry is not None and entry[1] == _size(path):
                self._known[path] = tuple(entry)
        entry = self._known.get(path)
        return None if entry is None else entry[0]

    def _cached(self):
        if not hasattr(self, "_cache"):
            self._cache = {}
            if self.cache_file and tf.io.gfile.exists(self.cache_file):
                with tf.io.gfile.GFile(self.cache_file) as stream:
                    self._cache = {
                        path: (entry["records"], entry["bytes"])
                        for path, entry in json.load(stream).items()
                    }
        return self._cache

    def _save(self):
        if not (self.writes and self.cache_file):
            return
        merged = {**self._cached(), **self._known}
        _files.write_text(
            self.cache_file,
            json.dumps(
                {
                    path: {"records": records, "bytes": size}
                    for path, (records, size) in sorted(merged.items())
                },
                indent=1,
            ),
        )


def _size(path):
    return tf.io.gfile.stat(path).length
