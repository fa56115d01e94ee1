"""Env family registry: lookup, lazy built-ins, family flags and defaults, wrapping of what families return."""

import gymnasium
import numpy as np
import pytest

from sfx.cfg import ConfigError
from sfx.registries import default_cfg, parse_args
from sfx.envs import (MultiAgentEnv, SingleAgentEnvAdapter, env_seed, find_family, make_env, register_env_family,
                      registered_prefixes, unregister_env_family)


class TwoAgents(MultiAgentEnv):
    num_agents = 2
    observation_space = gymnasium.spaces.Box(-1, 1, (3,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)


@pytest.fixture
def families():
    """Register test families; remove them afterwards."""
    added = []

    def add(prefix, *args, **kwargs):
        register_env_family(prefix, *args, **kwargs)
        added.append(prefix)

    yield add
    for prefix in added:
        unregister_env_family(prefix)


def test_builtin_gym_family_is_listed_and_found():
    assert "gym_" in registered_prefixes()
    assert find_family("gym_CartPole-v1").prefix == "gym_"


def test_longest_prefix_wins(families):
    families("tst_", lambda *a, **k: None)
    families("tst_long_", lambda *a, **k: None)
    assert find_family("tst_x").prefix == "tst_"
    assert find_family("tst_long_x").prefix == "tst_long_"


def test_unknown_env_names_the_value_and_lists_prefixes(families):
    families("tst_", lambda *a, **k: None)
    with pytest.raises(ConfigError, match=r"--env=nope_1 matches no env family; .*gym_, .*tst_"):
        find_family("nope_1")
    with pytest.raises(ConfigError, match="matches no env family"):
        find_family("gym_")  # a bare prefix names no env


def test_family_flags_and_default_overrides_reach_the_cfg(families, tmp_path):
    def add_params(parser):
        parser.add_argument("--tst_level", type=int, default=1, help="level")

    families("tst_", lambda *a, **k: None, add_params_fn=add_params, default_overrides={"rollout": 16,
                                                                                         "recurrence": 16})
    cfg = parse_args(["--env=tst_game", f"--train_dir={tmp_path}", "--tst_level=3"])
    assert (cfg.tst_level, cfg.rollout, cfg.recurrence) == (3, 16, 16)
    assert cfg.explicit_args == ["env", "train_dir", "tst_level"]
    with pytest.raises(ConfigError, match="unrecognized argument '--tst_level=3'"):
        parse_args(["--env=gym_CartPole-v1", f"--train_dir={tmp_path}", "--tst_level=3"])


def test_family_validation_runs(families):
    def validate(cfg):
        raise ConfigError(f"--env={cfg.env}: no such level")

    families("tst_", lambda *a, **k: None, validate_fn=validate)
    with pytest.raises(ConfigError, match="--env=tst_x: no such level"):
        default_cfg("tst_x")


def test_override_of_an_unknown_flag_is_a_programming_error(families):
    families("tst_", lambda *a, **k: None, default_overrides={"no_such_flag": 1})
    with pytest.raises(ValueError, match="no_such_flag"):
        default_cfg("tst_x")


def test_plain_gymnasium_env_is_wrapped_as_one_agent(families):
    seen = {}

    def make(full_name, cfg, env_config, render_mode=None):
        seen.update(name=full_name, env_config=env_config, render_mode=render_mode)
        return gymnasium.make("CartPole-v1")

    families("tst_", make)
    cfg = default_cfg("tst_cartpole", seed=5)
    env = make_env(cfg, {"worker_index": 1, "vector_index": 0, "env_id": 3}, render_mode="rgb_array")
    assert isinstance(env, SingleAgentEnvAdapter) and env.num_agents == 1
    assert seen == {"name": "tst_cartpole", "env_config": {"worker_index": 1, "vector_index": 0, "env_id": 3},
                    "render_mode": "rgb_array"}
    assert env.default_seed == 8
    env.close()


def test_multi_agent_env_passes_through(families):
    families("tst_", lambda *a, **k: TwoAgents())
    env = make_env(default_cfg("tst_two"))
    assert isinstance(env, TwoAgents) and env.num_agents == 2


def test_a_family_returning_something_else_fails_clearly(families):
    families("tst_", lambda *a, **k: object())
    with pytest.raises(TypeError, match="env family 'tst_' returned object"):
        make_env(default_cfg("tst_x"))


def test_env_seed():
    assert env_seed(default_cfg(), {"env_id": 3}) is None
    assert env_seed(default_cfg(seed=10), {"env_id": 3}) == 13
    assert env_seed(default_cfg(seed=10), None) == 10
    assert env_seed(default_cfg(seed=0), {"env_id": -1}) == 0  # the coordinator's probe env
