"""Image training: images/s of the ImageNet input pipeline alone against the training step.

    python benchmarks/image_training.py [--num-images 512] [--batch-size 64]
        [--architecture resnet50]

Writes ``--num_images`` JPEGs of 256 x 320 (smooth gradients plus noise, so that they compress
like photographs rather than flat colour) in ImageNet-format records to a temporary directory,
then reads shuffled training batches (random resized crop to ``--image_size``, flip,
normalization) with nothing consuming them. Then trains the image command's own model and LARS
optimizer (`keras_largebatch.vision.recipe.ImageClassification`) on the same pipeline and times
its steps. Prints one JSON object; ``pipeline_over_training`` above 1 means the step, not the
input, sets the pace.
"""

import argparse
import json
import os
import tempfile
import time

import numpy as np
import tensorflow as tf
from throughput import median_items_per_second

from keras_largebatch.training.plan import plan_run
from keras_largebatch.vision import config as config_lib
from keras_largebatch.vision import imagenet_records, input_pipeline
from keras_largebatch.vision.recipe import ImageClassification


def synthetic_jpeg(rng, height, width):
    """JPEG bytes of a noisy colour gradient."""
    rows = np.linspace(0, 1, height)[:, None, None]
    columns = np.linspace(0, 1, width)[None, :, None]
    colour = rng.uniform(0, 255, (1, 1, 3))
    image = colour * rows + (255 - colour) * columns + rng.normal(0, 20, (height, width, 3))
    return tf.io.encode_jpeg(np.clip(image, 0, 255).astype(np.uint8), quality=90).numpy()


def write_synthetic_records(directory, num_images, num_files, height, width, num_classes=1000):
    """Writes ``num_images`` records over ``num_files`` files; returns their glob pattern."""
    rng = np.random.default_rng(0)
    writers = [
        tf.io.TFRecordWriter(os.path.join(directory, f"train-{index:05d}"))
        for index in range(num_files)
    ]
    for index in range(num_images):
        feature = {
            imagenet_records.ENCODED_IMAGE: tf.train.Feature(
                bytes_list=tf.train.BytesList(value=[synthetic_jpeg(rng, height, width)])
            ),
            imagenet_records.LABEL: tf.train.Feature(
                int64_list=tf.train.Int64List(
                    value=[imagenet_records.DEFAULT_LABEL_OFFSET + index % num_classes]
                )
            ),
        }
        example = tf.train.Example(features=tf.train.Features(feature=feature))
        writers[index % num_files].write(example.SerializeToString(deterministic=True))
    for writer in writers:
        writer.close()
    return os.path.join(directory, "train-*")


def training_images_per_second(pattern, args):
    """Images/s of `model.fit` steps of the recipe's classifier with LARS on the records."""
    config = config_lib.load_config(
        overrides=[
            "data.dataset=imagenet",
            f"data.train_files=['{pattern}']",
            f"data.eval_files=['{pattern}']",
            f"data.num_train_examples={args.num_images}",
            f"model.architecture={args.architecture}",
            "model.num_classes=1000",
            f"model.image_size={args.image_size}",
            f"phases.0.global_batch_size={args.batch_size}",
            "phases.0.warmup_epochs=0",
            "strategy.name=default",
        ]
    )
    recipe = ImageClassification(config)
    phase = plan_run(config, num_replicas=1).phases[0]
    model = recipe.build_model()
    model.compile(optimizer=recipe.build_optimizer(phase, model), **recipe.compile_arguments(phase))
    dataset = recipe.dataset(phase, args.batch_size, tf.distribute.InputContext(), start_batch=0)
    # The first call traces and compiles the step; it is not timed.
    model.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0, shuffle=False)
    rates = []
    for _ in range(args.train_rounds):
        start = time.perf_counter()
        model.fit(dataset, epochs=1, steps_per_epoch=args.train_steps, verbose=0, shuffle=False)
        rates.append(args.train_steps * args.batch_size / (time.perf_counter() - start))
    return sorted(rates)[len(rates) // 2]


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--num-images", "--num_images", type=int, default=512)
    parser.add_argument("--num-files", "--num_files", type=int, default=8)
    parser.add_argument("--height", type=int, default=256, help="of the source JPEGs")
    parser.add_argument("--width", type=int, default=320, help="of the source JPEGs")
    parser.add_argument("--image-size", "--image_size", type=int, default=224)
    parser.add_argument("--batch-size", "--batch_size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20, help="batches per timed round")
    parser.add_argument("--warmup-steps", "--warmup_steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument(
        "--architecture", default="resnet50", choices=["small", "resnet18", "resnet34", "resnet50"]
    )
    parser.add_argument(
        "--train-steps", "--train_steps", type=int, default=2, help="steps per timed round"
    )
    parser.add_argument("--train-rounds", "--train_rounds", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        pattern = write_synthetic_records(
            directory, args.num_images, args.num_files, args.height, args.width
        )
        dataset = input_pipeline.make_imagenet_dataset(
            pattern,
            args.image_size,
            args.batch_size,
            is_training=True,
            shuffle_seed=0,
            dtype=args.dtype,
            shuffle_buffer_size=args.num_images,
        )
        rate = median_items_per_second(
            iter(dataset), args.batch_size, args.steps, args.warmup_steps, args.rounds
        )
        record_bytes = sum(os.path.getsize(path) for path in tf.io.gfile.glob(pattern))
        training = training_images_per_second(pattern, args)
    print(
        json.dumps(
            {
                "benchmark": "image_training",
                "pipeline_images_per_second": round(rate, 1),
                "training_images_per_second": round(training, 1),
                "pipeline_over_training": round(rate / training, 1),
                "architecture": args.architecture,
                "image_size": args.image_size,
                "batch_size": args.batch_size,
                "dtype": args.dtype,
                "source_images": args.num_images,
                "source_size": [args.height, args.width],
                "mean_record_kilobytes": round(record_bytes / args.num_images / 1000, 1),
                "files": args.num_files,
                "cpu_count": os.cpu_count(),
                "tensorflow": tf.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
