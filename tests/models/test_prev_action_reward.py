"""--use_prev_action_reward: the core's input gets the previous action (one-hot per categorical head,
zeros at an episode start) and the previous reward clipped to [-1, 1], for every core type."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from sfx.models import create_actor_critic
from sfx.models.obs import PREV_ACTION_KEY, PREV_REWARD_KEY

from model_helpers import make_cfg, random_obs, vector_space, seeded  # noqa: F401 (seeded: autouse fixture)


def _obs(n, action_rows, rewards):
    return {"obs": random_obs(vector_space(5), n), PREV_ACTION_KEY: torch.as_tensor(action_rows, dtype=torch.float32),
            PREV_REWARD_KEY: torch.as_tensor(rewards, dtype=torch.float32).reshape(n, 1)}


def test_one_hot_per_head_zeros_at_an_episode_start_and_clipped_rewards():
    model = create_actor_critic(make_cfg(use_prev_action_reward=True), vector_space(5),
                                spaces.Tuple([spaces.Discrete(3), spaces.Discrete(2)]))
    assert model.extra_input_size == 3 + 2 + 1
    obs = _obs(3, [[0, 0], [1, 2], [3, 1]], [0.0, 5.0, -0.25])  # stored as choice + 1, 0 = none
    extra = model.preprocessor.extra_input(obs)
    assert extra.tolist() == [[0, 0, 0, 0, 0, 0.0], [1, 0, 0, 0, 1, 1.0], [0, 0, 1, 1, 0, -0.25]]


def test_continuous_actions_go_in_as_they_are():
    model = create_actor_critic(make_cfg(use_prev_action_reward=True), vector_space(5),
                                spaces.Box(-1, 1, shape=(2,), dtype=np.float32))
    extra = model.preprocessor.extra_input(_obs(1, [[0.5, -2.0]], [-3.0]))
    assert extra.tolist() == [[0.5, -2.0, -1.0]]


@pytest.mark.parametrize("core", [dict(use_rnn=False), dict(rnn_type="gru"), dict(rnn_type="lstm"),
                                  dict(rnn_type="trxl", mem_len=4, n_layer=1, n_heads=2, d_head=4, d_inner=16)])
def test_every_core_sees_them(core):
    model = create_actor_critic(make_cfg(use_prev_action_reward=True, **core), vector_space(5), spaces.Discrete(3))
    states = model.initial_rnn_states(2)
    memory = torch.zeros(2, model.memory_len, model.memory_width) if model.memory_len else None
    a = _obs(2, [[1], [1]], [0.0, 0.0])
    b = {**a, PREV_ACTION_KEY: torch.tensor([[1.0], [3.0]]), PREV_REWARD_KEY: torch.tensor([[0.0], [0.0]])}
    with torch.no_grad():
        pa = model.forward_step(a, states, None, memory)["action_params"]
        pb = model.forward_step(b, states, None, memory)["action_params"]
    assert torch.equal(pa[0], pb[0]) and not torch.allclose(pa[1], pb[1])
    with pytest.raises(ValueError, match="use_prev_action_reward"):
        model.forward_step({"obs": a["obs"]}, states, None, memory)


def test_off_by_default_and_the_columns_are_then_ignored():
    model = create_actor_critic(make_cfg(), vector_space(5), spaces.Discrete(3))
    assert model.extra_input_size == 0
    obs = _obs(2, [[1], [2]], [1.0, 0.0])
    with torch.no_grad():
        with_cols = model.forward_step(obs, model.initial_rnn_states(2))["action_params"]
        without = model.forward_step({"obs": obs["obs"]}, model.initial_rnn_states(2))["action_params"]
    assert torch.equal(with_cols, without)
