"""BERT pretraining data: raw text to TFRecords, and the records' format. Nothing here depends on
how the records are trained on (the pretraining config, model or recipe).

    python -m keras_largebatch.bert.data --input-files 'corpus/*.txt' --output-dir data

The command (``__main__``) parses its arguments and calls the library, whose modules are imported
where they are used, so that it can quiet TensorFlow's start-up lines before anything imports it:

* `keras_largebatch.bert.data.pretraining_data`: the output directory, shards and manifest
  (``create_pretraining_data``, ``create_default_pretraining_data``).
* `keras_largebatch.bert.data.instances`: text files to documents, documents to sentence-pair
  instances.
* `keras_largebatch.bert.data.instance_tasks`: instance creation as fixed seeded tasks, inline or in
  worker processes.
* `keras_largebatch.bert.data.masking`: the masked-LM rule, shared with the input pipeline's dynamic
  masking.
* `keras_largebatch.bert.data.records`: the record schema, shared with the input pipeline's
  checker and parser.
* `keras_largebatch.bert.data.corpus` and `keras_largebatch.bert.data.vocab`: the default corpus
  (English prose shipped with Python) and the WordPiece vocabulary.
* `keras_largebatch.bert.data.manifest`: the data directory's ``manifest.json`` (what was
  written, and how many records each shard holds).
"""
