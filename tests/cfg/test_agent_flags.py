"""A flag means one thing for every agent, and a flag an agent would ignore is refused by name (issue 36): SAC
with APPO's or a recurrent core's flags, R2D2 with the actor-critic's value normalisation (another agent's flag:
the message names whose, issue 55); --algo=SAC --use_rnn=True says so in one line; --algo=SAC --help shows SAC's
flags without --env."""

import subprocess
import sys

import pytest

from sfx.cfg import ConfigError
from sfx.registries import default_cfg, parse_args


def _parse(tmp_path, *flags):
    return parse_args([*flags, f"--train_dir={tmp_path}", "--experiment=e"], resume=False)


@pytest.mark.parametrize("algo,env,flag,says", [
    ("SAC", "gym_Pendulum-v1", "--popart=True", "a flag of --algo=APPO"),
    ("SAC", "gym_Pendulum-v1", "--rnn_type=lstm", "without a recurrent core"),
    ("SAC", "gym_Pendulum-v1", "--learning_rate=0.001", "--actor_learning_rate, --critic_learning_rate"),
    ("SAC", "gym_Pendulum-v1", "--max_grad_norm=4.0", "clips no gradients"),  # given at its default: still refused
    ("SAC", "gym_Pendulum-v1", "--max_policy_lag=5", "at any age"),
    ("R2D2", "gym_CartPole-v1", "--normalize_returns=True", "a flag of --algo=APPO"),
    ("R2D2", "gym_CartPole-v1", "--aux_loss_reconstruction_coeff=0.1", "a flag of --algo=APPO"),
    ("R2D2", "gym_CartPole-v1", "--ppo_clip_ratio=0.2", "a flag of --algo=APPO"),
])
def test_a_flag_the_agent_would_ignore_is_refused_by_name(tmp_path, algo, env, flag, says):
    name, value = flag[2:].split("=")
    with pytest.raises(ConfigError) as e:
        _parse(tmp_path, f"--algo={algo}", f"--env={env}", flag)
    message = str(e.value)
    assert message.startswith(f"--{name}=") and f"is not read by --algo={algo}" in message and says in message
    assert "\n" not in message
    with pytest.raises(ConfigError, match=f"--{name}="):
        # given at the agent's default, or (another agent's flag) at any value: still refused
        default_cfg(env, algo=algo, **{name: default_cfg(env, algo=algo).__dict__.get(name, value)})


def test_another_agent_s_flag_is_named_as_such_in_each_spelling(tmp_path):
    for given, shown in ((["--popart", "True"], "--popart=True"), (["--popart"], "--popart"),
                         (["--popart", "--gamma=0.9"], "--popart")):
        with pytest.raises(ConfigError) as e:
            _parse(tmp_path, "--algo=R2D2", "--env=gym_CartPole-v1", *given)
        assert str(e.value).startswith(f"{shown} is not read by --algo=R2D2 (it would be ignored): a flag of "
                                       f"--algo=APPO"), str(e.value)
    with pytest.raises(ConfigError, match=r"unrecognized argument '--popartt=True' \(did you mean --popart, "):
        _parse(tmp_path, "--env=gym_CartPole-v1", "--popartt=True")


def test_the_flags_the_agent_reads_and_appo_s_own_pass(tmp_path):
    assert _parse(tmp_path, "--algo=SAC", "--env=gym_Pendulum-v1", "--use_rnn=False", "--actor_learning_rate=1e-3",
                  "--hidden_size=64", "--gamma=0.98").actor_learning_rate == 1e-3
    assert _parse(tmp_path, "--algo=R2D2", "--env=gym_CartPole-v1", "--learning_rate=1e-3", "--rnn_type=lstm",
                  "--max_grad_norm=10").rnn_type == "lstm"
    cfg = _parse(tmp_path, "--env=gym_CartPole-v1", "--popart=True", "--learning_rate=1e-3", "--max_policy_lag=5")
    assert cfg.popart and cfg.max_policy_lag == 5


def test_sac_with_a_recurrent_core_is_one_line_about_the_core(tmp_path):
    with pytest.raises(ConfigError) as e:
        _parse(tmp_path, "--algo=SAC", "--env=gym_Pendulum-v1", "--use_rnn=True")
    assert str(e.value).startswith("--use_rnn=True is not supported by --algo=SAC") and "--recurrence" not in str(e.value)


def test_replay_flags_state_their_unit_in_help_and_sac_s_help_needs_no_env():
    out = subprocess.run([sys.executable, "-m", "sfx.train", "--algo=SAC", "--help"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "SAC (--algo=SAC):" in text and "--actor_learning_rate" in text and "--ppo_clip_ratio" not in text
    for flag in ("--replay_ratio", "--replay_buffer_size"):
        help_text = text.rsplit(f"{flag} {flag.upper()[2:]}", 1)[1][:200]  # the help, not the usage line
        assert "unit:" in help_text, (flag, help_text)


def test_env_families_declare_per_agent_defaults_and_help_says_where_each_came_from(tmp_path):
    from bench.r2d2 import CARTPOLE_FLAGS

    # --algo=R2D2 on classic control with nothing else: the README's CartPole settings (its slow test learns them),
    # not SEED's Atari ones
    bare = _parse(tmp_path, "--algo=R2D2", "--env=gym_CartPole-v1")
    line = _parse(tmp_path, *CARTPOLE_FLAGS)
    skip = {"num_workers", "num_envs_per_worker", "device", "explicit_args", "command_line"}
    assert {k: v for k, v in vars(bare).items() if k not in skip} == {k: v for k, v in vars(line).items() if k not in skip}
    atari = default_cfg("atari_breakout", algo="R2D2")
    assert (atari.rollout, atari.replay_ratio, atari.replay_buffer_size) == (80, 1.5, 80_000)  # SEED's stay there
    # the RL Zoo's MuJoCo locomotion SAC starts learning after 10,000 steps; other tasks keep SAC's 100
    assert default_cfg("mujoco_halfcheetah", algo="SAC").learning_starts == 10_000
    assert default_cfg("mujoco_invertedpendulum", algo="SAC").learning_starts == 100
    assert default_cfg("mujoco_halfcheetah", algo="SAC", learning_starts=5).learning_starts == 5
    out = subprocess.run([sys.executable, "-m", "sfx.train", "--algo=R2D2", "--env=gym_CartPole-v1", "--help"],
                         capture_output=True, text=True, timeout=120)
    text = " ".join(out.stdout.split())
    assert "(default: 8.0, from env family gym_ for --algo=R2D2)" in text  # --replay_ratio
    assert "(default: 0.001, from --algo=R2D2)" in text  # --adam_eps: the agent's own
    assert "(default: mlp, from env family gym_)" in text  # --encoder_type: the family's
