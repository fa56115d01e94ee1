"""Command-line parsing: flag names and defaults, booleans, errors, --help, explicit flags."""

import os
import re

import pytest

from sfx.cfg import ConfigError, explicit_flags
from sfx.registries import build_parser, default_cfg, parse_args

CARTPOLE = "--env=gym_CartPole-v1"


@pytest.fixture
def tdir(tmp_path):
    return f"--train_dir={tmp_path / 'train_dir'}"


# Sample Factory 1.x names and the defaults the brief fixes
SF_DEFAULTS = {
    "algo": "APPO", "experiment": "default_experiment", "train_dir": "./train_dir", "device": "gpu", "seed": None,
    "serial_mode": False, "num_workers": os.cpu_count(), "num_envs_per_worker": 2, "worker_num_splits": 2,
    "policy_workers_per_policy": 1, "num_policies": 1, "rollout": 32, "recurrence": 32, "batch_size": 1024,
    "num_batches_per_iteration": 1, "ppo_epochs": 1, "learning_rate": 1e-4, "adam_eps": 1e-6, "adam_beta1": 0.9,
    "adam_beta2": 0.999, "gamma": 0.99, "gae_lambda": 0.95, "with_vtrace": True, "vtrace_rho": 1.0,
    "vtrace_c": 1.0, "ppo_clip_ratio": 0.1, "ppo_clip_value": 1.0, "exploration_loss_coeff": 0.003,
    "value_loss_coeff": 0.5, "kl_loss_coeff": 0.0, "max_grad_norm": 4.0, "max_policy_lag": 100,
    "reward_scale": 1.0, "reward_clip": 10.0, "use_rnn": True, "rnn_type": "gru", "rnn_num_layers": 1,
    "nonlinearity": "elu", "obs_scale": 255.0, "normalize_input": True, "normalize_returns": True,
    "train_for_env_steps": 10_000_000_000, "train_for_seconds": 10_000_000_000, "save_every_sec": 120,
    "keep_checkpoints": 3, "save_milestones_sec": -1, "experiment_summaries_interval": 20,
    "report_every_sec": 5.0, "stats_avg": 100, "env_frameskip": 1, "traj_buffers_excess_ratio": 2.0,
    "set_workers_cpu_affinity": True,
}


def test_defaults_follow_sample_factory():
    cfg = default_cfg()
    for name, value in SF_DEFAULTS.items():
        assert getattr(cfg, name) == value, name


def test_generic_defaults_without_family_overrides():
    cfg = build_parser(None).parse_args([CARTPOLE])
    assert (cfg.encoder_type, cfg.encoder_subtype, cfg.hidden_size) == ("conv", "convnet_simple", 512)


def test_gym_family_overrides_defaults_but_cli_wins(tdir):
    cfg = default_cfg("gym_CartPole-v1")
    # 512 wide like Sample Factory's gym MLP (a 64-unit one stalls on Acrobot with standardized inputs)
    assert (cfg.encoder_type, cfg.encoder_subtype, cfg.hidden_size) == ("mlp", "mlp_mujoco", 512)
    assert default_cfg("mujoco_hopper").hidden_size == 64  # a family may override any generic default
    cfg = parse_args([CARTPOLE, tdir, "--hidden_size=256", "--encoder_type", "conv"])
    assert (cfg.hidden_size, cfg.encoder_type) == (256, "conv")


def test_an_agent_s_own_defaults_beat_the_family_s_and_the_command_line_beats_both(tdir):
    # the mujoco family's defaults are APPO's (64-unit tanh MLPs, batch 1024, rollout 64, input normalisation);
    # SAC's are the paper's, and they hold on that family; what SAC does not set (envs per worker, the reward
    # clip, the encoder) stays the family's
    appo, sac = default_cfg("mujoco_halfcheetah"), default_cfg("mujoco_halfcheetah", algo="SAC")
    assert (appo.hidden_size, appo.nonlinearity, appo.batch_size, appo.rollout, appo.normalize_input) == \
           (64, "tanh", 1024, 64, True)
    assert (sac.hidden_size, sac.nonlinearity, sac.batch_size, sac.rollout, sac.normalize_input) == \
           (256, "relu", 256, 8, False)
    assert (sac.num_envs_per_worker, sac.reward_clip, sac.encoder_type) == \
           (appo.num_envs_per_worker, appo.reward_clip, appo.encoder_type)
    cfg = parse_args(["--env=mujoco_halfcheetah", "--algo=SAC", tdir, "--hidden_size=64", "--batch_size=100"])
    # SAC's batch is of transitions, not trajectories: any size, whatever the rollout (APPO's must divide)
    assert (cfg.hidden_size, cfg.batch_size, cfg.nonlinearity) == (64, 100, "relu")
    with pytest.raises(ConfigError, match=r"--batch_size=100 must be a multiple of --rollout=64"):
        parse_args(["--env=mujoco_halfcheetah", tdir, "--batch_size=100"])
    assert default_cfg("atari_breakout", algo="R2D2").rollout == 80  # SEED RL's, not the family's


@pytest.mark.parametrize("text,expected", [
    ("True", True), ("true", True), ("1", True), ("False", False), ("false", False), ("0", False)])
def test_bool_values(tdir, text, expected):
    assert parse_args([CARTPOLE, tdir, f"--use_rnn={text}"]).use_rnn is expected
    assert parse_args([CARTPOLE, tdir, "--normalize_input", text]).normalize_input is expected


def test_bare_bool_flag_means_true(tdir):
    cfg = parse_args([CARTPOLE, tdir, "--serial_mode"])
    assert cfg.serial_mode is True


def test_bad_bool_is_one_clear_line(tdir):
    with pytest.raises(ConfigError, match=r"--use_rnn.*'maybe'") as e:
        parse_args([CARTPOLE, tdir, "--use_rnn=maybe"])
    assert "\n" not in str(e.value)


def test_unknown_flag_suggests_the_close_one(tdir):
    with pytest.raises(ConfigError, match=r"'--rolout=64'.*did you mean --rollout"):
        parse_args([CARTPOLE, tdir, "--rolout=64"])


def test_bad_choice(tdir):
    with pytest.raises(ConfigError, match=r"--rnn_type.*'rnn'.*'gru', 'lstm'"):
        parse_args([CARTPOLE, tdir, "--rnn_type=rnn"])


def test_bad_int(tdir):
    with pytest.raises(ConfigError, match=r"--rollout.*'many'"):
        parse_args([CARTPOLE, tdir, "--rollout=many"])


def test_env_steps_accept_scientific_notation(tdir):
    assert parse_args([CARTPOLE, tdir, "--train_for_env_steps=1e6"]).train_for_env_steps == 1_000_000
    with pytest.raises(ConfigError, match="whole number"):
        parse_args([CARTPOLE, tdir, "--train_for_env_steps=1.5"])


def test_missing_env(tdir):
    with pytest.raises(ConfigError, match=r"--env is required.*gym_"):
        parse_args([tdir])


def test_unknown_env_family_lists_prefixes(tdir):
    with pytest.raises(ConfigError, match=r"--env=foo_bar matches no env family.*gym_"):
        parse_args(["--env=foo_bar", tdir])


def test_unknown_gym_id_suggests_close_matches(tdir):
    with pytest.raises(ConfigError, match=r"'CartPol-v1'.*did you mean: CartPole-v1"):
        parse_args(["--env=gym_CartPol-v1", tdir])


def _help_chunks(text: str) -> dict[str, str]:
    chunks = re.split(r"\n  (?=--)", text)
    return {c.split()[0]: " ".join(c.split()) for c in chunks[1:]}


@pytest.mark.parametrize("evaluation", [False, True])
def test_help_lists_every_flag_with_its_default(capsys, evaluation):
    with pytest.raises(SystemExit) as e:
        parse_args([CARTPOLE, "--help"], evaluation=evaluation)
    assert e.value.code == 0
    chunks = _help_chunks(capsys.readouterr().out)
    parser = build_parser("gym_CartPole-v1", evaluation=evaluation)
    flags = [a.option_strings[-1] for a in parser._actions if a.dest != "help"]
    assert len(flags) > 50
    for flag in flags:
        assert flag in chunks, flag
        assert "(default: " in chunks[flag], flag
    assert "--max_num_episodes" in chunks if evaluation else "--max_num_episodes" not in chunks


def test_help_without_env_still_prints(capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["--help"])
    assert e.value.code == 0
    assert "--num_workers" in capsys.readouterr().out


def test_explicit_args_both_forms_and_default_values(tdir):
    cfg = parse_args([CARTPOLE, tdir, "--rollout", "64", "--batch_size=1024", "--seed=1", "--use_rnn=True"])
    # batch_size and use_rnn are given with their default values: still explicit
    assert cfg.explicit_args == ["batch_size", "env", "rollout", "seed", "train_dir", "use_rnn"]
    assert cfg.command_line.startswith("--env=gym_CartPole-v1 ")
    assert "--rollout 64" in cfg.command_line


def test_explicit_flags_ignores_family_default_overrides():
    parser = build_parser("gym_CartPole-v1")
    assert explicit_flags(parser, [CARTPOLE, "--no_such"]) == {"env"}
    assert explicit_flags(parser, [CARTPOLE, "--hidden_size", "64"]) == {"env", "hidden_size"}


def test_evaluation_flags_and_defaults(tmp_path):
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "cfg.json").write_text("{}")
    cfg = parse_args([CARTPOLE, f"--train_dir={tmp_path}", "--experiment=exp"], evaluation=True)
    assert (cfg.max_num_episodes, cfg.max_num_frames, cfg.no_render, cfg.save_video, cfg.video_name,
            cfg.policy_index, cfg.deterministic, cfg.fps) == (10, 1_000_000_000, False, False, None, 0, False, 0)
    cfg = parse_args([CARTPOLE, f"--train_dir={tmp_path}", "--experiment=exp", "--no_render", "--deterministic",
                      "--save_video", "--fps=30", "--max_num_episodes=2"], evaluation=True)
    assert (cfg.no_render, cfg.deterministic, cfg.save_video, cfg.fps, cfg.max_num_episodes) == (True, True, True,
                                                                                                  30, 2)


def test_training_parser_has_no_evaluation_flags(tdir):
    with pytest.raises(ConfigError, match="unrecognized argument '--no_render'"):
        parse_args([CARTPOLE, tdir, "--no_render"])


def test_evaluation_without_experiment_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match=r"no experiment at .*nothing_here.*train first"):
        parse_args([CARTPOLE, f"--train_dir={tmp_path}", "--experiment=nothing_here"], evaluation=True)


def test_default_cfg_touches_no_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = default_cfg(rollout=16, recurrence=16, batch_size=64)
    assert (cfg.rollout, cfg.recurrence, cfg.batch_size) == (16, 16, 64)
    assert list(tmp_path.iterdir()) == []


def test_default_cfg_rejects_unknown_fields():
    with pytest.raises(ConfigError, match="rolout"):
        default_cfg(rolout=16)


def test_default_cfg_validates():
    with pytest.raises(ConfigError, match="--batch_size=100 must be a multiple of --rollout=32"):
        default_cfg(batch_size=100)
