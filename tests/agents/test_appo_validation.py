"""APPO's validation (sfx/agents/appo.py): replayed trajectories need V-trace's off-policy correction."""

import json

import pytest

from sfx.cfg import ConfigError
from sfx.registries import default_cfg

STANDARD = json.dumps([{"type": "queue", "capacity": 1, "sample_ratio": 0.5},
                       {"type": "standard", "capacity": 100, "sample_ratio": 0.5}])


def test_replay_with_gae_is_refused_in_one_line_naming_both_flags_and_what_is_allowed():
    with pytest.raises(ConfigError) as e:
        default_cfg(env="gym_CartPole-v1", replay_parameters=STANDARD, with_vtrace=False)
    message = str(e.value)
    assert "\n" not in message
    assert "--replay_parameters" in message and "--with_vtrace=False" in message and "allowed" in message
    # the doom family's APPO defaults to GAE: replay there needs V-trace asked for
    with pytest.raises(ConfigError, match="--with_vtrace=False"):
        default_cfg(env="doom_basic", replay_parameters=STANDARD)
    default_cfg(env="doom_basic", replay_parameters=STANDARD, with_vtrace=True)
    default_cfg(env="gym_CartPole-v1", replay_parameters=STANDARD)
    # only the fresh stream (a queue alone) replays nothing: GAE is fine
    default_cfg(env="gym_CartPole-v1", with_vtrace=False,
                replay_parameters=json.dumps([{"type": "queue", "capacity": 1, "sample_ratio": 1.0}]))


def test_more_minibatch_steps_per_iteration_than_the_policy_lag_allows_is_refused():
    # 32 x 10 = 320 policy versions per iteration: with --max_policy_lag=100 the samples collected during one
    # iteration are all too old for the next (a SEED / RL Zoo style PPO setting trained nothing before)
    with pytest.raises(ConfigError) as e:
        default_cfg(env="gym_CartPole-v1", num_batches_per_iteration=32, ppo_epochs=10)
    message = str(e.value)
    assert "\n" not in message and "= 320 minibatch steps" in message and "--max_policy_lag=100" in message
    default_cfg(env="gym_CartPole-v1", num_batches_per_iteration=32, ppo_epochs=10, max_policy_lag=10000)
    default_cfg(env="gym_CartPole-v1", num_batches_per_iteration=4, ppo_epochs=10)
