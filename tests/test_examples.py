"""sfx_examples run as users run them (``python -m sfx_examples.<name>``), and the register_env API they use."""

import subprocess
import sys
from pathlib import Path

import pytest

from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.envs import MultiAgentEnv, find_family, make_env, register_env, register_env_family, unregister_env_family

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ["train_custom_env_custom_model", "train_gym_env", "train_custom_multi_agent_env", "train_custom_doom_scenario"]


@pytest.fixture
def forget():
    names = []
    yield names.append
    for name in names:
        unregister_env_family(name)


def test_register_env_matches_only_the_exact_name(forget):
    register_env("tst_exact", lambda *a, **k: None, default_overrides={"hidden_size": 32})
    forget("tst_exact")
    assert find_family("tst_exact").exact
    assert default_cfg("tst_exact").hidden_size == 32
    for other in ("tst_exact2", "tst_exac", "tst_exact_v1"):
        with pytest.raises(ConfigError, match=f"--env={other} matches no env family"):
            find_family(other)


def test_an_exact_name_beats_a_family_prefix(forget):
    register_env_family("tst_", lambda *a, **k: "family")
    register_env("tst_special", lambda *a, **k: "exact")
    forget("tst_"), forget("tst_special")
    assert find_family("tst_special").make_env_fn() == "exact"
    assert find_family("tst_other").make_env_fn() == "family"


def test_register_env_refuses_a_family_prefix(forget):
    register_env_family("tst_", lambda *a, **k: None)
    forget("tst_")
    for name in ("tst_", "gym_"):
        with pytest.raises(ValueError, match="already the prefix of an env family"):
            register_env(name, lambda *a, **k: None)


def test_multi_agent_example_env_follows_the_protocol():
    from sfx_examples.train_custom_multi_agent_env import ENV_NAME

    env = make_env(default_cfg(ENV_NAME, seed=2))
    assert isinstance(env, MultiAgentEnv) and env.num_agents == 2
    obs, infos = env.reset()
    assert len(obs) == 2 and all(o.dtype == env.observation_space.dtype and o in env.observation_space for o in obs)
    ends = sat_out = 0
    for _ in range(200):
        obs, rewards, terminated, truncated, infos = env.step([env.action_space.sample() for _ in range(2)])
        assert all(o in env.observation_space for o in obs) and all("is_active" in i for i in infos)
        match_over = terminated[0] or truncated[0]
        for i in range(2):
            if not infos[i]["is_active"]:
                assert rewards[i] == 0.0
                sat_out += 1
                if not match_over:
                    assert obs[i][-1] == 0.0  # it sits out, and sees that it does
            if terminated[i] or truncated[i]:
                ends += 1
                assert terminated[i] != truncated[i]
                assert {"reward", "len", "reached_goal", "blocked_moves"} <= set(infos[i]["episode"])
                assert infos[i]["final_obs"] in env.observation_space
        assert match_over == (terminated[1] or truncated[1])  # matches end for both agents at once
    assert ends >= 2 * (200 // 30) and sat_out > 0


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_as_a_module(tmp_path, name):
    cmd = [sys.executable, "-m", f"sfx_examples.{name}", "--train_for_env_steps=3000", f"--train_dir={tmp_path}",
           "--experiment=ex"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    exp = tmp_path / "ex"
    assert (exp / "cfg.json").is_file()
    assert list((exp / "checkpoint_p0").glob("*.pth")), f"no checkpoint in {exp}: {proc.stderr[-2000:]}"


def test_example_reports_a_bad_flag_as_a_config_error(tmp_path):
    cmd = [sys.executable, "-m", "sfx_examples.train_gym_env", "--rollout=0", f"--train_dir={tmp_path}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--rollout=0 must be a positive integer" in proc.stderr
