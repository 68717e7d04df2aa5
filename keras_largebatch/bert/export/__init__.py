"""A BERT pretraining run as a keras-hub preset: the ``keras-largebatch-export`` command
(``__main__``), reading the run (`run`) and writing the preset (`preset`).

    python -m keras_largebatch.bert.export RUN_DIR PRESET_DIR [--step N] [--sequence-length L]

writes into the new directory PRESET_DIR the backbone of one checkpoint of the run of
`keras_largebatch.bert.pretraining` in RUN_DIR (``config.json``, ``model.weights.h5``,
``metadata.json``), a `keras_hub.models.BertTokenizer` over the run's vocabulary
(``tokenizer.json``, ``assets/tokenizer/vocabulary.txt``), a
`keras_hub.models.BertTextClassifierPreprocessor` (``preprocessor.json``) and a ``README.md``
saying what the preset holds and how to load it, so that keras-hub's own loaders take it::

    backbone = keras_hub.models.BertBackbone.from_preset(PRESET_DIR)
    classifier = keras_hub.models.BertTextClassifier.from_preset(PRESET_DIR, num_classes=2)
    classifier.fit(x=["A sentence.", "Another one."], y=[0, 1])

The tokenizer lowercases and strips accents exactly as pretraining tokenized its text
(`keras_largebatch.bert.data.vocab.make_tokenizer`): a tokenizer that differs, such as
`BertTokenizer`'s default ``lowercase=False``, maps raw text to other ids than the model learned,
and costs accuracy without any error. The pretraining heads (masked LM, next sentence) are not
exported: keras-hub's tasks put their own heads on the backbone.

Nothing in RUN_DIR is written or renamed, and the run's data is not recreated: the model is
rebuilt from the run's ``run_config.json`` (`keras_largebatch.bert.pretraining.recipe.build_model`)
and the
checkpoint loaded into it. The preset is built in a temporary sibling directory and renamed into
place, so PRESET_DIR either holds a whole preset or does not exist (or stays the empty directory
it was).
"""

from keras_largebatch.bert.export.preset import export_preset

__all__ = ["export_preset"]
