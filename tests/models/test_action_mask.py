"""Action masks (an ``action_mask`` key in a Dict observation): masked choices get zero probability when
acting and in the learner's log-probabilities and entropy; a head with no allowed choice stays unmasked."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from sfx.algo.distributions import make_action_distribution
from sfx.cfg import ConfigError
from sfx.models import create_actor_critic

from model_helpers import make_cfg, seeded  # noqa: F401 (seeded: autouse fixture)


def _space(mask_size):
    return spaces.Dict({"board": spaces.Box(-1, 1, shape=(6,), dtype=np.float32),
                        "action_mask": spaces.Box(0, 1, shape=(mask_size,), dtype=np.int8)})


def _obs(mask_rows):
    mask = torch.as_tensor(mask_rows, dtype=torch.int8)
    return {"board": torch.randn(mask.shape[0], 6), "action_mask": mask}


@pytest.mark.parametrize("use_rnn", [False, True])
def test_masked_choices_are_never_taken_and_cost_nothing_in_the_entropy(use_rnn):
    model = create_actor_critic(make_cfg(use_rnn=use_rnn), _space(4), spaces.Discrete(4))
    assert model.action_mask_size == 4
    obs = _obs([[1, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0]])
    with torch.no_grad():
        out = model.forward_step(obs, model.initial_rnn_states(3))
    dist = make_action_distribution(spaces.Discrete(4), out["action_params"])
    probs = torch.softmax(out["action_params"], dim=1)
    assert probs[0, 1] == 0 and probs[0, 3] == 0 and probs[1, 3] == 1.0
    assert (probs[2] > 0).all()  # nothing allowed: an agent that does not act, left unmasked
    actions = torch.stack([dist.sample() for _ in range(200)])
    actions = actions.reshape(200, 3)
    assert set(actions[:, 0].tolist()) <= {0, 2} and set(actions[:, 1].tolist()) == {3}
    entropy = dist.entropy()
    assert torch.isfinite(entropy).all() and entropy[1] == 0
    # the learner's recomputation sees the same mask: same params, finite log-probs of the taken actions
    seq = model.forward_sequence({k: v.unsqueeze(1) for k, v in obs.items()}, model.initial_rnn_states(3),
                                 torch.ones(3, 1, dtype=torch.bool))
    assert torch.allclose(seq["action_params"][:, 0], out["action_params"])


def test_each_head_of_a_tuple_is_masked_on_its_own():
    space = spaces.Tuple([spaces.Discrete(2), spaces.Discrete(3)])
    model = create_actor_critic(make_cfg(use_rnn=False), _space(5), space)
    with torch.no_grad():
        params = model.forward_step(_obs([[0, 1, 0, 0, 0]]), model.initial_rnn_states(1))["action_params"]
    assert torch.softmax(params[0, :2], 0).tolist() == [0.0, 1.0]
    assert (torch.softmax(params[0, 2:], 0) > 0).all()  # second head: nothing allowed -> unmasked


def test_a_mask_of_the_wrong_size_or_for_continuous_actions_is_refused():
    with pytest.raises(ConfigError, match=r"'action_mask' has shape \(4,\); allowed: \(3,\)"):
        create_actor_critic(make_cfg(), _space(4), spaces.Discrete(3))
    with pytest.raises(ConfigError, match="continuous actions take no mask"):
        create_actor_critic(make_cfg(), _space(2), spaces.Box(-1, 1, shape=(2,), dtype=np.float32))
