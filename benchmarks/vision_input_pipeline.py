"""Images per second of the ImageNet training input pipeline alone, on synthetic records.

    python benchmarks/vision_input_pipeline.py [--num_images 512] [--batch_size 64]

Writes ``--num_images`` JPEGs of 256 x 320 (smooth gradients plus noise, so that they compress
like photographs rather than flat colour) in ImageNet-format records to a temporary directory,
then reads shuffled training batches (random resized crop to ``--image_size``, flip,
normalization) with nothing consuming them, and prints one JSON object. The figure bounds the
input side: a training step that consumes images more slowly than this is not input-bound.
"""

import argparse
import json
import os
import tempfile

import numpy as np
import tensorflow as tf
from throughput import median_items_per_second

from keras_largebatch.vision import imagenet_records
from keras_largebatch.vision import input_pipeline


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
    writers = [tf.io.TFRecordWriter(os.path.join(directory, f"train-{index:05d}"))
               for index in range(num_files)]
    for index in range(num_images):
        feature = {
            imagenet_records.ENCODED_IMAGE: tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[synthetic_jpeg(rng, height, width)])),
            imagenet_records.LABEL: tf.train.Feature(int64_list=tf.train.Int64List(
                value=[imagenet_records.DEFAULT_LABEL_OFFSET + index % num_classes])),
        }
        example = tf.train.Example(features=tf.train.Features(feature=feature))
        writers[index % num_files].write(example.SerializeToString())
    for writer in writers:
        writer.close()
    return os.path.join(directory, "train-*")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--num_images", type=int, default=512)
    parser.add_argument("--num_files", type=int, default=8)
    parser.add_argument("--height", type=int, default=256, help="of the source JPEGs")
    parser.add_argument("--width", type=int, default=320, help="of the source JPEGs")
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20, help="batches per timed round")
    parser.add_argument("--warmup_steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        pattern = write_synthetic_records(directory, args.num_images, args.num_files,
                                          args.height, args.width)
        dataset = input_pipeline.make_imagenet_dataset(
            pattern, args.image_size, args.batch_size, is_training=True, shuffle_seed=0,
            dtype=args.dtype, shuffle_buffer_size=args.num_images)
        rate = median_items_per_second(iter(dataset), args.batch_size, args.steps,
                                       args.warmup_steps, args.rounds)
        record_bytes = sum(os.path.getsize(path) for path in tf.io.gfile.glob(pattern))
    print(json.dumps({
        "benchmark": "vision_input_pipeline",
        "images_per_second": round(rate, 1),
        "image_size": args.image_size,
        "batch_size": args.batch_size,
        "dtype": args.dtype,
        "source_images": args.num_images,
        "source_size": [args.height, args.width],
        "mean_record_kilobytes": round(record_bytes / args.num_images / 1000, 1),
        "files": args.num_files,
        "cpu_count": os.cpu_count(),
        "tensorflow": tf.__version__,
    }))


if __name__ == "__main__":
    main()
