"""Examples per second of the BERT input pipeline alone, on the default corpus at seq 128.

    python benchmarks/input_pipeline.py [--batch-size 32] [--steps 500] [--dynamic-masking]

Creates the default pretraining data first if ``--data-dir`` lacks it (reused afterwards), then
reads training batches with nothing consuming them and prints the rate as one JSON object. The
figure bounds the input side: a training step that consumes batches more slowly than this is not
input-bound.
"""

import argparse
import json

from throughput import add_default_data_arguments, median_items_per_second

from keras_largebatch.bert.data import pretraining_data
from keras_largebatch.bert.pretraining import input_pipeline


def measure_examples_per_second(
    record_files,
    batch_size,
    steps,
    warmup_steps,
    seq_length=128,
    max_predictions_per_seq=20,
    dynamic_masking=False,
    vocab_file=None,
    rounds=5,
):
    """Median over ``rounds`` rounds of ``steps`` batches, after ``warmup_steps`` batches."""
    dataset = input_pipeline.make_pretraining_dataset(
        record_files,
        seq_length,
        max_predictions_per_seq,
        batch_size,
        seed=0,
        dynamic_masking=dynamic_masking,
        vocabulary=vocab_file,
    )
    return median_items_per_second(iter(dataset), batch_size, steps, warmup_steps, rounds)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    add_default_data_arguments(parser)
    parser.add_argument("--batch-size", "--batch_size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=500, help="batches per timed round")
    parser.add_argument("--warmup-steps", "--warmup_steps", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds; the median counts")
    parser.add_argument(
        "--dynamic-masking",
        "--dynamic_masking",
        action="store_true",
        help="read unmasked records and mask them in the pipeline",
    )
    args = parser.parse_args(argv)
    data_dir = args.data_dir + ("-dynamic" if args.dynamic_masking else "")
    data = pretraining_data.create_default_pretraining_data(
        data_dir, dupe_factor=args.dupe_factor, dynamic_masking=args.dynamic_masking
    )
    rate = measure_examples_per_second(
        data.record_files,
        args.batch_size,
        args.steps,
        args.warmup_steps,
        dynamic_masking=args.dynamic_masking,
        vocab_file=data.vocab_file,
        rounds=args.rounds,
    )
    print(
        json.dumps(
            {
                "benchmark": "input_pipeline",
                "examples_per_second": rate,
                "seq_length": 128,
                "batch_size": args.batch_size,
                "masking": "dynamic" if args.dynamic_masking else "static",
                "num_examples": data.num_examples,
                "files": len(data.record_files),
            }
        )
    )


if __name__ == "__main__":
    main()
