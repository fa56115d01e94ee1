"""Observation structure: a Box, or a Dict of Boxes (e.g. an image plus a measurements vector).

Inside sfx an observation batch is always a ``dict[str, Tensor]`` keyed like the space: a Box
observation travels under the key ``"obs"``, a Dict observation under its own keys. Buffers hold
one tensor per key; the model unwraps ``"obs"`` again for Box spaces, so encoders for Box spaces
(built-in or custom) still receive a plain tensor.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import gymnasium as gym
import numpy as np
import torch

from sfx.errors import ConfigError

BOX_KEY = "obs"

# --use_prev_action_reward: the previous action and reward travel with the observation, under keys of their
# own that the rollout worker writes and the model takes out before preprocessing (never encoded or
# normalized). The action row is stored as the buffers store actions, categorical choices plus one so that
# zeros mean "no previous action" (an episode start); the reward is stored raw (the model clips it).
PREV_ACTION_KEY = "_prev_action"
PREV_REWARD_KEY = "_prev_reward"
EXTRA_KEYS = (PREV_ACTION_KEY, PREV_REWARD_KEY)


# Action masks: a Dict observation may carry the key "action_mask", a Box of one 0/1 entry per choice of each
# categorical action head (heads concatenated; 1 = allowed), e.g. what PettingZoo's classic games put in their
# observations. The model takes it out before encoding and gives masked choices zero probability, when acting
# and in the learner's log-probabilities and entropy; a row with no allowed choice is left unmasked (an agent
# that is not acting).
ACTION_MASK_KEY = "action_mask"


def prev_action_reward_spec(action_dim: int) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """The buffer keys ``--use_prev_action_reward`` adds to the observation spec (``action_dim``: the
    columns of one stored action)."""
    return {PREV_ACTION_KEY: ((int(action_dim),), np.dtype(np.float32)),
            PREV_REWARD_KEY: ((1,), np.dtype(np.float32))}


def obs_spec(space: gym.Space) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """``{key: (shape, dtype)}`` of one agent's observation; keys of a Dict space sorted."""
    if isinstance(space, gym.spaces.Box):
        return {BOX_KEY: (tuple(space.shape), np.dtype(space.dtype))}
    if isinstance(space, gym.spaces.Dict):
        spec = {}
        for key in sorted(space.spaces):
            sub = space.spaces[key]
            if not isinstance(sub, gym.spaces.Box):
                raise ConfigError(f"observation key {key!r} has space {sub}; allowed inside a Dict: Box "
                                  f"(encode discrete values as an integer Box)")
            spec[key] = (tuple(sub.shape), np.dtype(sub.dtype))
        if not spec:
            raise ConfigError("observation space is an empty Dict; allowed: a Dict with at least one Box")
        return spec
    raise ConfigError(f"observation space {space} is not supported; allowed: Box, or Dict of Boxes")


def max_obs_ndim(space: gym.Space) -> int:
    """Largest number of dimensions among the observation's parts (2+ means an image is in it)."""
    return max(len(shape) for shape, _ in obs_spec(space).values())


def as_obs_dict(obs: torch.Tensor | Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A batch as ``{key: tensor}``: a plain tensor is a Box observation."""
    if isinstance(obs, Mapping):
        return dict(obs)
    return {BOX_KEY: obs}


def map_obs(fn: Callable[[torch.Tensor], torch.Tensor], obs: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``{key: fn(tensor)}``."""
    return {k: fn(v) for k, v in obs.items()}


def stack_obs(observations: list[Any], space: gym.Space) -> dict[str, torch.Tensor]:
    """Per-agent observations as the env returned them -> one batch ``{key: [N, *shape]}``."""
    spec = obs_spec(space)
    if isinstance(space, gym.spaces.Box):
        return {BOX_KEY: torch.from_numpy(np.stack([np.asarray(o, dtype=spec[BOX_KEY][1]) for o in observations]))}
    return {k: torch.from_numpy(np.stack([np.asarray(o[k], dtype=dt) for o in observations]))
            for k, (_, dt) in spec.items()}
