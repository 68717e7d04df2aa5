"""Record counts from the data's manifest, before any other count."""

import json

import tensorflow as tf

from keras_largebatch.bert.data import manifest


def _write(path, records):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for index in range(records):
            writer.write(b"%d" % index)


def test_counts_come_from_the_manifest_and_only_the_unlisted_files_are_asked_for(tmp_path):
    listed, other = tmp_path / "data" / "a.tfrecord", tmp_path / "b.tfrecord"
    listed.parent.mkdir()
    _write(listed, 1)
    _write(other, 2)
    # The manifest's figure (7) is not the file's (1): it is read, not counted.
    with open(listed.parent / manifest.MANIFEST_FILENAME, "w") as stream:
        json.dump({"record_files": [str(listed)], "records_per_file": [7]}, stream)
    asked = []

    def count_records(files):
        asked.append(files)
        return [2 for _ in files]

    count = manifest.manifests_first(count_records)
    assert count([listed, other]) == [7, 2]
    assert asked == [[str(other)]]
    assert count([listed]) == [7] and len(asked) == 1
    assert manifest.records_in(other) is None


def test_a_manifest_that_does_not_list_the_file_or_cannot_be_read_gives_none(tmp_path):
    path = tmp_path / "a.tfrecord"
    _write(path, 1)
    manifest_file = tmp_path / manifest.MANIFEST_FILENAME
    manifest_file.write_text(json.dumps({"record_files": ["x.tfrecord"], "records_per_file": [3]}))
    assert manifest.records_in(path) is None
    manifest_file.write_text("{not json")
    assert manifest.records_in(path) is None
    manifest_file.write_text(json.dumps({"record_files": [str(path)], "records_per_file": []}))
    assert manifest.records_in(path) is None
