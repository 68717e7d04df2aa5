"""Tests of keras_largebatch.bert: the BERT pretraining recipe and its data."""
