"""``python -m keras_largebatch.bert.data`` (``keras-largebatch-create-data``): raw text to BERT
pretraining TFRecords; see `keras_largebatch.bert.data`."""

import sys

from keras_largebatch import _extras
from keras_largebatch._logging import quiet_tensorflow_logs
from keras_largebatch.training import command


def build_parser():
    """The command-line interface of ``keras-largebatch-create-data``."""
    from keras_largebatch.bert.data import masking
    from keras_largebatch.bert.data import vocab as vocab_lib
    from keras_largebatch.bert.data.defaults import (
        DEFAULT_CORPUS_DUPE_FACTOR,
        DEFAULT_MAX_PREDICTIONS_PER_SEQ,
        DEFAULT_MAX_SEQ_LENGTH,
        DEFAULT_SEED,
    )
    from keras_largebatch.bert.data.instances import DEFAULT_SHORT_SEQ_PROB
    from keras_largebatch.bert.data.pretraining_data import (
        DEFAULT_DUPE_FACTOR,
        DEFAULT_NUM_OUTPUT_SHARDS,
    )

    parser = command.ArgumentParser(
        prog="keras-largebatch-create-data",
        description="Write BERT pretraining TFRecords (google-research/bert schema) from text "
        "files with one sentence per line and a blank line between documents.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--input-files", nargs="+", metavar="PATH_OR_GLOB", help="input text files or glob patterns"
    )
    source.add_argument(
        "--default-corpus",
        action="store_true",
        help="use the embedded corpus (Python's own documentation) and build "
        "its vocabulary; excludes --vocab-file",
    )
    parser.add_argument(
        "--output-dir",
        required=True,
        help="directory for the record shards, manifest.json and vocab.txt",
    )
    parser.add_argument(
        "--vocab-file",
        default=None,
        help="vocabulary to use, one token per line (default: build one from "
        "the input into OUTPUT_DIR/vocab.txt)",
    )
    parser.add_argument(
        "--preset",
        default=None,
        metavar="PRESET_DIR",
        help="tokenize as this keras-hub BERT preset directory does (its vocabulary, "
        "lowercasing and accent stripping), for continued pretraining with model.preset; "
        "excludes --vocab-file and --default-corpus",
    )
    parser.add_argument(
        "--vocabulary-size",
        type=int,
        default=vocab_lib.DEFAULT_VOCABULARY_SIZE,
        help="most tokens in a built vocabulary (default: %(default)s)",
    )
    parser.add_argument(
        "--max-seq-length",
        type=int,
        default=DEFAULT_MAX_SEQ_LENGTH,
        help="tokens per instance, [CLS] and [SEP]s included (default: %(default)s)",
    )
    parser.add_argument(
        "--max-predictions-per-seq",
        type=int,
        default=DEFAULT_MAX_PREDICTIONS_PER_SEQ,
        help="most masked positions per instance (default: %(default)s)",
    )
    parser.add_argument(
        "--masked-lm-prob",
        type=float,
        default=masking.DEFAULT_MASKED_LM_PROB,
        help="fraction of tokens to mask (default: %(default)s)",
    )
    parser.add_argument(
        "--dupe-factor",
        type=int,
        default=None,
        help="passes over the corpus, each with new cuts and masks (default: "
        f"{DEFAULT_DUPE_FACTOR}, or {DEFAULT_CORPUS_DUPE_FACTOR} with "
        "--default-corpus)",
    )
    parser.add_argument(
        "--short-seq-prob",
        type=float,
        default=DEFAULT_SHORT_SEQ_PROB,
        help="probability of a shorter random target length (default: %(default)s)",
    )
    parser.add_argument(
        "--num-output-shards",
        type=int,
        default=DEFAULT_NUM_OUTPUT_SHARDS,
        help="record files, written round-robin (default: %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=DEFAULT_SEED,
        help="the same seed writes the same bytes (default: %(default)s)",
    )
    parser.add_argument(
        "--num-workers",
        type=int,
        default=None,
        help="worker processes; the output does not depend on it (default: "
        "all available CPUs for inputs large enough to repay starting "
        "them, else 1)",
    )
    parser.add_argument(
        "--dynamic-masking",
        action="store_true",
        help="write unmasked records (no masked_lm_* features) for the input "
        "pipeline's per-epoch masking",
    )
    parser.add_argument(
        "--whole-word-mask",
        action="store_true",
        help="mask whole words (a token and its ## continuations together), as "
        "google-research/bert's --do_whole_word_mask; not with --dynamic-masking",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace existing output in OUTPUT_DIR (without it, existing "
        "output is an error raised before any work)",
    )
    return parser


def main(argv=None):
    """Entry point of ``keras-largebatch-create-data``; returns the process exit status."""
    # The parser reads the data modules' defaults, which import TensorFlow: the extra first.
    _extras.exit_unless_installed("keras-largebatch-create-data", "bert")
    quiet_tensorflow_logs()
    from keras_largebatch.bert.data.defaults import DEFAULT_CORPUS_DUPE_FACTOR
    from keras_largebatch.bert.data.pretraining_data import (
        DEFAULT_DUPE_FACTOR,
        create_default_pretraining_data,
        create_pretraining_data,
    )

    parser = build_parser()
    args = parser.parse_args(argv)
    common = dict(
        max_seq_length=args.max_seq_length,
        max_predictions_per_seq=args.max_predictions_per_seq,
        vocabulary_size=args.vocabulary_size,
        masked_lm_prob=args.masked_lm_prob,
        short_seq_prob=args.short_seq_prob,
        num_output_shards=args.num_output_shards,
        seed=args.seed,
        num_workers=args.num_workers,
        dynamic_masking=args.dynamic_masking,
        whole_word_mask=args.whole_word_mask,
        overwrite=args.overwrite,
    )
    vocab_file = args.vocab_file
    casing = {}
    if args.preset is not None:
        if args.vocab_file is not None or args.default_corpus:
            parser.error(
                "--preset takes the vocabulary from the preset; drop "
                + ("--vocab-file" if args.vocab_file is not None else "--default-corpus")
            )
        from keras_largebatch.bert.data import vocab as vocab_lib

        try:
            tokenization = vocab_lib.preset_tokenization(args.preset)
        except ValueError as error:
            print(f"keras-largebatch-create-data: error: --preset: {error}", file=sys.stderr)
            return 2
        vocab_file = tokenization.pop("vocab_file")
        casing = tokenization
    try:
        if args.default_corpus:
            if args.vocab_file is not None:
                parser.error("--default-corpus builds its own vocabulary; drop --vocab-file")
            create_default_pretraining_data(
                args.output_dir,
                dupe_factor=(
                    DEFAULT_CORPUS_DUPE_FACTOR if args.dupe_factor is None else args.dupe_factor
                ),
                **common,
            )
        else:
            create_pretraining_data(
                args.input_files,
                args.output_dir,
                vocab_file=vocab_file,
                **casing,
                dupe_factor=DEFAULT_DUPE_FACTOR if args.dupe_factor is None else args.dupe_factor,
                **common,
            )
    except (TypeError, ValueError, FileExistsError, FileNotFoundError) as error:
        print(f"keras-largebatch-create-data: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
