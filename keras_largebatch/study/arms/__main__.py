"""``python -m keras_largebatch.study.arms``: run one arm of the study's second edition.

Parses the options and calls `runner.run_arm` (``--report-only``: `runner.report_only`;
``--estimate``: `estimate.estimate`; ``--noise-scale``: `noise_scale.measure`, then the
report); see `keras_largebatch.study.arms`.
"""

import sys

from keras_largebatch._logging import quiet_tensorflow_logs
from keras_largebatch.training import command


def parse_arguments(argv=None):
    parser = command.ArgumentParser(
        prog="python -m keras_largebatch.study.arms",
        description="Run one arm of the large-batch study's second edition: a pilot of the "
        "baseline measures its critical batch size, then the layer-wise optimizer and the "
        "baseline are searched, refined and rerun with fresh seeds at multiples of it. A "
        "stopped arm resumes.",
    )
    parser.add_argument(
        "--arm", help="resnet_lars or bert_lamb (with --report-only: read from the ledger)"
    )
    parser.add_argument("--preset", default="full", help="tiny or full")
    parser.add_argument("--output-dir", help="default: runs/study-ARM-PRESET")
    parser.add_argument("--data-dir", help="where the workload's data are read or cached")
    parser.add_argument("--page", help="a Markdown page holding this arm's report markers")
    parser.add_argument("--max-trials", type=int, help="stop after this many trials")
    parser.add_argument("--report-only", action="store_true", help="report; train nothing")
    parser.add_argument(
        "--estimate",
        action="store_true",
        help="measure the workload's speed here and print what the arm would cost",
    )
    parser.add_argument(
        "--noise-scale",
        action="store_true",
        help="measure the baseline's noise scale now (the pilot's first cell must be "
        "complete; a complete arm measures it anyway), then report",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="start over in an output directory holding an arm with other settings",
    )
    arguments = parser.parse_args(argv)
    if arguments.arm is None and not (arguments.report_only and arguments.output_dir):
        parser.error("--arm is required (but with --report-only and --output-dir)")
    return arguments


def main(argv=None):
    arguments = parse_arguments(argv)
    quiet_tensorflow_logs()
    from keras_largebatch.study.arms import config as config_lib
    from keras_largebatch.study.arms import runner
    from keras_largebatch.study.ledger import LedgerError

    output_dir = arguments.output_dir or runner.default_output_dir(arguments.arm, arguments.preset)
    try:
        if arguments.report_only:
            runner.report_only(output_dir, page=arguments.page)
            return 0
        config = config_lib.preset(arguments.arm, arguments.preset, data_dir=arguments.data_dir)
        if arguments.estimate:
            from keras_largebatch.study.arms import estimate

            for line in estimate.estimate(config, output_dir):
                print(line)
            return 0
        if arguments.noise_scale:
            from keras_largebatch.study.arms import noise_scale

            noise_scale.measure(config, output_dir)
            runner.report_only(output_dir, page=arguments.page)
            return 0
        runner.run_arm(
            config,
            output_dir,
            overwrite=arguments.overwrite,
            page=arguments.page,
            max_trials=arguments.max_trials,
        )
    except (ValueError, TypeError, FileNotFoundError, LedgerError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
