"""The embedded default corpus: real prose, in the pretraining input format, deterministic."""

import pydoc_data.topics

from keras_largebatch.bert.data import corpus


def test_documents_are_deterministic_prose():
    documents = corpus.default_corpus_documents()
    assert documents == corpus.default_corpus_documents()
    sentences = [sentence for document in documents for sentence in document]
    # CPython 3.11: 162 documents, 8,563 sentences, 121,664 words; other versions are close.
    assert len(documents) > 120 and len(sentences) > 6000
    assert sum(len(sentence.split()) for sentence in sentences) > 90_000
    assert all(len(document) >= 2 for document in documents)
    assert all("\n" not in sentence and sentence == sentence.strip() for sentence in sentences)
    # Grammar productions and interactive examples are code, not sentences.
    assert not [sentence for sentence in sentences if "::=" in sentence or ">>>" in sentence]
    # The first paragraph of help("assert"), split at its sentence boundary.
    assert (
        "Assert statements are a convenient way to insert debugging assertions into a program:"
    ) in sentences
    # Headings ("The "assert" statement" over a row of asterisks) are dropped.
    assert 'The "assert" statement' not in sentences


def test_sentence_boundaries():
    text = (
        "First sentence here, e.g. with an abbreviation. Second one (really) ends! "
        'Third is "quoted." Fourth sentence is last.\n\n   code = "not prose"\n'
    )
    assert corpus.prose_sentences(text) == [
        "First sentence here, e.g. with an abbreviation.",
        "Second one (really) ends!",
        'Third is "quoted."',
        "Fourth sentence is last.",
    ]


def test_documents_come_from_topics_then_module_docstrings():
    documents = corpus.default_corpus_documents()
    topic_documents = [
        corpus.prose_sentences(pydoc_data.topics.topics[key])
        for key in sorted(pydoc_data.topics.topics)
    ]
    topic_documents = [document for document in topic_documents if len(document) >= 2]
    assert documents[: len(topic_documents)] == topic_documents
    argparse_document = documents[len(topic_documents)]
    assert argparse_document[0] == (
        "This module is an optparse-inspired command-line parsing library that:"
    )


def test_written_file_has_one_sentence_per_line_and_blank_lines_between_documents(tmp_path):
    path = corpus.write_default_corpus(str(tmp_path / "corpus"))
    assert path == str(tmp_path / "corpus" / "default_corpus.txt")
    text = open(path, encoding="utf-8").read()
    blocks = text.rstrip("\n").split("\n\n")
    assert [block.split("\n") for block in blocks] == corpus.default_corpus_documents()
    assert "\n\n\n" not in text and text.endswith("\n")
