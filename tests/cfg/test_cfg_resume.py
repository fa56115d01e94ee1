"""Resume: cfg.json values over defaults, explicit command-line flags over saved values."""

import json

import pytest

from sfx.cfg import ConfigError
from sfx.registries import parse_args
from sfx.experiment import cfg_path, save_cfg


def argv_for(tmp_path, *extra, experiment="exp"):
    return ["--env=gym_CartPole-v1", f"--train_dir={tmp_path}", f"--experiment={experiment}", *extra]


@pytest.fixture
def saved(tmp_path):
    """An experiment trained once with a few non-default flags."""
    cfg = parse_args(argv_for(tmp_path, "--rollout=64", "--batch_size=512", "--learning_rate=0.001",
                              "--use_rnn=False", "--seed=7"))
    save_cfg(cfg)
    return cfg


def test_saved_values_come_back(tmp_path, saved):
    cfg = parse_args(argv_for(tmp_path))
    assert (cfg.rollout, cfg.batch_size, cfg.learning_rate, cfg.use_rnn, cfg.seed) == (64, 512, 0.001, False, 7)
    assert cfg.explicit_args == ["env", "experiment", "train_dir"]


@pytest.mark.parametrize("form", [["--learning_rate=0.0005"], ["--learning_rate", "0.0005"]])
def test_explicit_flags_override_saved(tmp_path, saved, form):
    cfg = parse_args(argv_for(tmp_path, *form))
    assert cfg.learning_rate == 0.0005
    assert cfg.rollout == 64  # not given: saved value kept


def test_explicit_flag_with_default_value_overrides_saved(tmp_path, saved):
    # --use_rnn=True is the default value; a value comparison would wrongly keep the saved False
    cfg = parse_args(argv_for(tmp_path, "--use_rnn=True", "--rollout=32"))
    assert cfg.use_rnn is True and cfg.rollout == 32


def test_flags_new_since_the_save_get_defaults_and_stale_ones_are_dropped(tmp_path, saved):
    path = cfg_path(saved)
    data = json.loads(path.read_text())
    del data["stats_avg"]
    data["flag_from_an_old_version"] = 3
    path.write_text(json.dumps(data))
    cfg = parse_args(argv_for(tmp_path))
    assert cfg.stats_avg == 100
    assert not hasattr(cfg, "flag_from_an_old_version")
    assert cfg.rollout == 64


def test_resumed_cfg_is_validated(tmp_path, saved):
    with pytest.raises(ConfigError, match="--batch_size=512 must be a multiple of --rollout=96"):
        parse_args(argv_for(tmp_path, "--rollout=96", "--recurrence=32"))


def test_corrupted_cfg_json_names_file_and_json_error(tmp_path, saved):
    path = cfg_path(saved)
    path.write_text('{"rollout": 64,')
    with pytest.raises(ConfigError) as e:
        parse_args(argv_for(tmp_path))
    msg = str(e.value)
    assert str(path) in msg and "invalid JSON" in msg and "line 1" in msg
    assert "\n" not in msg


def test_cfg_json_not_an_object(tmp_path, saved):
    cfg_path(saved).write_text("[1, 2]")
    with pytest.raises(ConfigError, match="expected a JSON object"):
        parse_args(argv_for(tmp_path))


def test_evaluation_resumes_training_cfg_with_eval_defaults(tmp_path, saved):
    cfg = parse_args(argv_for(tmp_path, "--fps=10"), evaluation=True)
    assert (cfg.rollout, cfg.use_rnn, cfg.fps, cfg.max_num_episodes) == (64, False, 10, 10)


def test_nested_experiment_name(tmp_path):
    cfg = parse_args(argv_for(tmp_path, "--rollout=16", "--recurrence=16", experiment="sweep/run_1"))
    save_cfg(cfg)
    assert (tmp_path / "sweep" / "run_1" / "cfg.json").is_file()
    again = parse_args(argv_for(tmp_path, experiment="sweep/run_1"))
    assert (again.rollout, again.experiment, again.train_dir) == (16, "sweep/run_1", str(tmp_path))


def test_moved_experiment_uses_the_current_location(tmp_path, saved):
    moved = tmp_path / "moved"
    (tmp_path / "exp").rename(moved)
    cfg = parse_args(["--env=gym_CartPole-v1", f"--train_dir={tmp_path}", "--experiment=moved"])
    assert (cfg.experiment, cfg.rollout) == ("moved", 64)


def test_an_experiment_saved_before_a_flag_existed_resumes_with_what_it_trained_with(tmp_path, caplog):
    """doom's --resize_interpolation arrived with default linear; a doom experiment saved before it trained on area."""
    doom = ["--env=doom_basic", f"--train_dir={tmp_path}"]
    cfg = parse_args([*doom, "--experiment=old"])
    save_cfg(cfg)
    path = cfg_path(cfg)
    old = json.loads(path.read_text())
    del old["resize_interpolation"]  # as written before the flag existed
    path.write_text(json.dumps(old))
    with caplog.at_level("INFO"):
        assert parse_args([*doom, "--experiment=old"]).resize_interpolation == "area"
    assert "saved before --resize_interpolation existed" in caplog.text
    assert parse_args([*doom, "--experiment=old", "--resize_interpolation=nearest"]).resize_interpolation == "nearest"
    # saved with the flag: its value; a new experiment: the new default
    save_cfg(parse_args([*doom, "--experiment=new"]))
    assert parse_args([*doom, "--experiment=new"]).resize_interpolation == "linear"
    assert parse_args([*doom, "--experiment=fresh"]).resize_interpolation == "linear"
