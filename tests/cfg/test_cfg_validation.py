"""Validation: each bad value fails with one line naming it and what is allowed."""

import pytest

from sfx.cfg import ConfigError
from sfx.registries import default_cfg, parse_args
from sfx.cfg.validation import POSITIVE_INTS

APPO_SIZES = ("num_batches_per_iteration", "ppo_epochs")  # APPO's own flags: its validation checks them

SIZES = ["num_workers", "num_envs_per_worker", "worker_num_splits", "rollout", "recurrence", "batch_size",
         "num_batches_per_iteration", "ppo_epochs", "hidden_size", "rnn_num_layers", "num_policies",
         "policy_workers_per_policy", "keep_checkpoints", "max_policy_lag", "stats_avg"]


def one_line_error(**overrides) -> str:
    with pytest.raises(ConfigError) as e:
        default_cfg(**overrides)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_every_size_is_checked():
    assert set(SIZES) - set(APPO_SIZES) <= set(POSITIVE_INTS)


@pytest.mark.parametrize("name", SIZES)
@pytest.mark.parametrize("value", [0, -2])
def test_sizes_must_be_positive(name, value):
    assert one_line_error(**{name: value}) == f"--{name}={value} must be a positive integer (> 0)"


@pytest.mark.parametrize("lr", [0.0, -1e-4])
def test_learning_rate_must_be_positive(lr):
    assert one_line_error(learning_rate=lr) == f"--learning_rate={lr} must be > 0"


@pytest.mark.parametrize("gamma", [0.0, -0.5, 1.01])
def test_gamma_range(gamma):
    assert one_line_error(gamma=gamma) == f"--gamma={gamma} must be in (0, 1]"


def test_gamma_one_is_fine():
    assert default_cfg(gamma=1.0).gamma == 1.0


@pytest.mark.parametrize("name", ["gae_lambda", "vtrace_lambda"])
@pytest.mark.parametrize("lam", [-0.1, 1.5])
def test_lambda_range(name, lam):
    assert one_line_error(**{name: lam}) == f"--{name}={lam} must be in [0, 1]"


@pytest.mark.parametrize("name", ["gae_lambda", "vtrace_lambda"])
@pytest.mark.parametrize("lam", [0.0, 1.0])
def test_lambda_bounds_are_allowed(name, lam):
    assert getattr(default_cfg(**{name: lam}), name) == lam


def test_batches_ahead_is_a_count_zero_turns_the_gate_off_and_minus_one_is_auto():
    assert one_line_error(batches_ahead=-2) == \
        "--batches_ahead=-2 must be >= 0 (0 = only the trajectory slots bound sampling) or -1 (the algorithm's choice)"
    assert default_cfg().batches_ahead == -1
    assert default_cfg(batches_ahead=0).batches_ahead == 0 and default_cfg(batches_ahead=2).batches_ahead == 2


def test_envs_per_worker_multiple_of_splits():
    assert one_line_error(num_envs_per_worker=3, worker_num_splits=2) == \
        "--num_envs_per_worker=3 must be a multiple of --worker_num_splits=2"
    assert default_cfg(num_envs_per_worker=3, worker_num_splits=1).num_envs_per_worker == 3


def test_batch_size_multiple_of_rollout():
    assert one_line_error(batch_size=100) == "--batch_size=100 must be a multiple of --rollout=32"


def test_rollout_multiple_of_recurrence_with_rnn_only():
    assert one_line_error(rollout=30, recurrence=32, batch_size=60) == \
        "--rollout=30 must be a multiple of --recurrence=32 (with --use_rnn=True)"
    assert default_cfg(rollout=30, recurrence=32, batch_size=60, use_rnn=False).rollout == 30


def test_milestones_minus_one_or_positive():
    assert default_cfg(save_milestones_sec=600).save_milestones_sec == 600
    assert "--save_milestones_sec=0" in one_line_error(save_milestones_sec=0)


def test_policy_index_within_num_policies(tmp_path):
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "cfg.json").write_text('{"num_policies": 2}')
    argv = ["--env=gym_CartPole-v1", f"--train_dir={tmp_path}", "--experiment=exp"]
    assert parse_args(argv + ["--policy_index=1"], evaluation=True).policy_index == 1
    with pytest.raises(ConfigError, match=r"--policy_index=2 must be in \[0, 1\]"):
        parse_args(argv + ["--policy_index=2"], evaluation=True)


def test_unwritable_train_dir_names_path_and_os_error(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    bad = blocker / "train_dir"
    with pytest.raises(ConfigError) as e:
        parse_args(["--env=gym_CartPole-v1", f"--train_dir={bad}"])
    msg = str(e.value)
    assert msg.startswith(f"--train_dir={bad} is not a writable folder: ")
    assert "Not a directory" in msg


def test_train_dir_is_created_and_left_clean(tmp_path):
    td = tmp_path / "new" / "train_dir"
    parse_args(["--env=gym_CartPole-v1", f"--train_dir={td}"])
    assert td.is_dir() and list(td.iterdir()) == []


def test_gym_time_limit_must_be_positive():
    assert "--gym_max_episode_steps=0" in one_line_error(gym_max_episode_steps=0)
