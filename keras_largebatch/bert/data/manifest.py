"""The data directory's ``manifest.json``, which `pretraining_data` writes last: the config that
made the records, ``vocab_file``, ``record_files``, ``num_examples`` and ``records_per_file``.

Training reads one thing from it: how many records each shard holds, so that positioning the
input (`keras_largebatch.input_order`) does not read every shard to count them.
"""

import json
import os

import tensorflow as tf

MANIFEST_FILENAME = "manifest.json"


def records_in(record_file):
    """The records of ``record_file`` as the manifest beside it lists them, or None (no readable
    manifest there, or one that does not list the file)."""
    manifest_file = os.path.join(os.path.dirname(str(record_file)), MANIFEST_FILENAME)
    if not tf.io.gfile.exists(manifest_file):
        return None
    try:
        with tf.io.gfile.GFile(manifest_file) as stream:
            manifest = json.load(stream)
        names = [os.path.basename(name) for name in manifest["record_files"]]
        counts = manifest["records_per_file"]
    except (ValueError, KeyError, TypeError):
        return None
    name = os.path.basename(str(record_file))
    if name not in names or len(counts) != len(names):
        return None
    return int(counts[names.index(name)])


def manifests_first(count_records):
    """A ``files -> [records of each]`` function that takes each count from the manifest beside
    the file where there is one, and asks ``count_records`` (such as a
    `keras_largebatch.input_order.RecordCounts`) for the others, in one call."""

    def count(files):
        files = [str(path) for path in files]
        listed = {path: records_in(path) for path in files}
        others = [path for path in files if listed[path] is None]
        if others:
            listed.update(zip(others, count_records(others)))
        return [listed[path] for path in files]

    return count


def vocabulary_of(record_file):
    """The ``vocab_file`` that the manifest beside ``record_file`` records the records were
    tokenized with, or None (no readable manifest there, or one that does not list the file)."""
    if records_in(record_file) is None:
        return None
    manifest_file = os.path.join(os.path.dirname(str(record_file)), MANIFEST_FILENAME)
    with tf.io.gfile.GFile(manifest_file) as stream:
        return json.load(stream).get("vocab_file")
