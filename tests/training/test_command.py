"""The commands' shared command line: one flag style, and bundled configs named by --config."""

import shutil
from pathlib import Path

import pytest

from keras_largebatch.bert.data import __main__ as create_data
from keras_largebatch.bert.pretraining import __main__ as pretrain
from keras_largebatch.bert.pretraining import config as bert_config
from keras_largebatch.plot_schedule import __main__ as plot_schedule
from keras_largebatch.study import __main__ as study_command
from keras_largebatch.training import command
from keras_largebatch.vision import __main__ as train
from keras_largebatch.vision import config as vision_config

CONFIGS = Path(__file__).resolve().parents[2] / "tpu_configs"
BERT = sorted(path.stem for path in CONFIGS.glob("bert_*.yaml"))
IMAGES = sorted(path.stem for path in CONFIGS.glob("resnet50_*.yaml"))
PARSERS = {
    "pretrain": pretrain.build_parser(),
    "train-images": train.build_parser(),
    "create-data": create_data.build_parser(),
    "plot-schedule": plot_schedule._parser(),
}


def _option_strings(parser):
    return [option for action in parser._actions for option in action.option_strings]


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_option_is_spelled_with_dashes(name):
    options = [option for option in _option_strings(PARSERS[name]) if option.startswith("--")]
    assert options and all("_" not in option for option in options), options
    help_text = PARSERS[name].format_help()
    assert all(option.replace("-", "_") not in help_text for option in options if "-" in option[2:])


def test_the_study_options_are_spelled_with_dashes(capsys):
    with pytest.raises(SystemExit):
        study_command.parse_arguments(["--help"])
    help_text = capsys.readouterr().out
    assert "--output-dir" in help_text and "--batch-sizes" in help_text
    assert "--output_dir" not in help_text and "--batch_sizes" not in help_text


@pytest.mark.parametrize(
    "argv",
    [
        ["--print-config", "--config", "bert_tiny_default", "log_interval=5"],
        ["--print_config", "--config=bert_tiny_default", "log_interval=5"],
    ],
)
def test_a_recipe_command_takes_both_spellings(argv):
    args = pretrain.build_parser().parse_args(argv)
    assert (args.print_config, args.config, args.overrides) == (
        True,
        "bert_tiny_default",
        ["log_interval=5"],
    )


def test_create_data_takes_both_spellings():
    dashed = create_data.build_parser().parse_args(
        ["--default-corpus", "--output-dir", "out_dir", "--max-seq-length=32", "--num-workers", "1"]
    )
    underscored = create_data.build_parser().parse_args(
        ["--default_corpus", "--output_dir", "out_dir", "--max_seq_length=32", "--num_workers", "1"]
    )
    assert vars(dashed) == vars(underscored)
    assert (dashed.default_corpus, dashed.output_dir, dashed.max_seq_length) == (
        True,
        "out_dir",
        32,
    )


def test_only_option_names_are_respelled():
    parser = command.ArgumentParser(prog="test")
    parser.add_argument("--output-dir")
    parser.add_argument("rest", nargs="*")
    args = parser.parse_args(["--output_dir=a_b", "key_1=--x_y", "--", "--not_an_option"])
    assert args.output_dir == "a_b" and args.rest == ["key_1=--x_y", "--not_an_option"]


def test_the_study_output_directory_defaults_under_runs_by_preset():
    assert study_command.parse_arguments([]).output_dir == "runs/study-default"
    assert study_command.parse_arguments(["--preset", "tiny"]).output_dir == "runs/study-tiny"
    both = [["--output-dir", "elsewhere"], ["--output_dir", "elsewhere"]]
    assert [study_command.parse_arguments(argv).output_dir for argv in both] == ["elsewhere"] * 2
    assert study_command.parse_arguments(["--batch_sizes", "64,256"]).batch_sizes == [64, 256]


def test_each_command_has_its_own_bundled_configs():
    assert list(command.bundled_configs(bert_config.load_config)) == BERT
    assert list(command.bundled_configs(vision_config.load_config)) == IMAGES


def test_a_name_is_the_bundled_file_wherever_the_command_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = command.config_path("bert_large_lamb_32k", bert_config.load_config)
    assert Path(path).read_bytes() == (CONFIGS / "bert_large_lamb_32k.yaml").read_bytes()
    assert command.config_path(None, bert_config.load_config) is None


def test_a_file_wins_over_a_bundled_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bert_tiny_default").write_text("log_interval: 7\n")
    assert command.config_path("bert_tiny_default", bert_config.load_config) == "bert_tiny_default"
    relative = tmp_path / "tpu_configs" / "bert_tiny_default.yaml"
    relative.parent.mkdir()
    shutil.copy(CONFIGS / "bert_tiny_default.yaml", relative)
    assert command.config_path(str(relative), bert_config.load_config) == str(relative)


def test_a_path_is_a_path_even_where_it_is_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for config in ("tpu_configs/bert_tiny_default.yaml", "bert_tiny_default.yaml"):
        assert command.config_path(config, bert_config.load_config) == config
        assert pretrain.main(["--config", config, "--print-config"]) == 2
        assert "No such file or directory" in capsys.readouterr().err


def test_an_unknown_name_is_an_error_listing_the_commands_configs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    listed = ", ".join(IMAGES)
    with pytest.raises(ValueError) as error:
        command.config_path("resnet50_lars_16k", vision_config.load_config)
    assert str(error.value) == (
        "--config 'resnet50_lars_16k' is neither a file nor one of this command's bundled "
        f"configs: {listed}"
    )
    assert train.main(["--config", "bert_tiny_default", "--print-config"]) == 2
    assert capsys.readouterr().err == (
        "keras-largebatch-train-images: error: --config 'bert_tiny_default' is neither a file "
        f"nor one of this command's bundled configs (it is one of another command): {listed}\n"
    )


def test_list_configs_prints_the_commands_names(capsys):
    assert pretrain.main(["--list-configs"]) == 0
    assert capsys.readouterr().out.split() == BERT
    assert train.main(["--list_configs"]) == 0
    assert capsys.readouterr().out.split() == IMAGES


def test_print_config_of_a_name_is_that_of_its_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert train.main(["--print-config", "--config", "resnet50_lars_64k", "log_interval=3"]) == 0
    printed = capsys.readouterr().out
    expected = vision_config.load_config(
        str(CONFIGS / "resnet50_lars_64k.yaml"), ["log_interval=3"]
    )
    assert printed == expected.to_yaml()


def test_plot_schedule_reads_a_bundled_bert_recipe_by_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        plot_schedule.main(["lr.png", "--config", "resnet50_lars_32k"])
    assert exit_info.value.code == 2
    assert f"bundled configs (it is one of another command): {', '.join(BERT)}" in (
        capsys.readouterr().err
    )


def test_plot_schedule_plots_a_bundled_recipe_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert plot_schedule.main(["lr.png", "--config", "bert_large_lamb_nvidia"]) == 0
    assert (tmp_path / "lr.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
