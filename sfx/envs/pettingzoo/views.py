"""What the two adapters share: one agent's observation as sfx sees it, action masks, the random
player and the per-agent statistics of a match (see the package docstring for the rules)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium
import numpy as np

from sfx.envs.multi_agent import MultiAgentEnv
from sfx.errors import ConfigError

ACTION_MASK_KEY = "action_mask"  # sfx.models.obs.ACTION_MASK_KEY (envs do not import models)
OBSERVATION_KEY = "observation"  # PettingZoo's own name for the rest of a masked observation


def categorical_sizes(space: gymnasium.Space) -> list[int] | None:
    """Choices per categorical head (Discrete: one head, MultiDiscrete: one per entry); None otherwise."""
    if isinstance(space, gymnasium.spaces.Discrete):
        return [int(space.n)]
    if isinstance(space, gymnasium.spaces.MultiDiscrete):
        return [int(n) for n in np.asarray(space.nvec).reshape(-1)]
    return None


def _convert_box(space: gymnasium.spaces.Box) -> tuple[gymnasium.spaces.Box, np.dtype]:
    """The Box sfx stores for an env Box, and the dtype to cast to.

    0/1 planes (bool, or integers within [0, 1]: PettingZoo's boards) become float32: sfx reads a
    2-D+ integer Box as pixels to divide by ``--obs_scale`` and a 1-D integer Box in a Dict as token
    ids, neither of which a board is. float64 becomes float32. Other integers (pixels) stay.
    """
    dtype = np.dtype(space.dtype)
    binary = dtype == np.bool_ or (np.issubdtype(dtype, np.integer) and np.all(space.low >= 0)
                                   and np.all(space.high <= 1))
    if binary or dtype == np.float64:
        low = np.asarray(space.low, np.float32)
        high = np.asarray(space.high, np.float32)
        return gymnasium.spaces.Box(low, high, space.shape, np.float32), np.dtype(np.float32)
    return space, dtype


class AgentView:
    """One agent's PettingZoo observation -> sfx's (a Box, or a Dict of Boxes), with the action mask.

    Args:
        obs_space: the agent's PettingZoo observation space (Box, Discrete, or a Dict of those;
            ``action_mask`` inside a Dict is the env's mask).
        action_space: the agent's action space; when it is categorical the sfx observation always
            carries an ``action_mask`` key (a Box obs becomes ``{"observation": ..., "action_mask": ...}``).
        env_name: for error messages.
    """

    def __init__(self, obs_space: gymnasium.Space, action_space: gymnasium.Space, env_name: str) -> None:
        self.mask_sizes = categorical_sizes(action_space)
        self.action_space = action_space
        self.env_has_mask = isinstance(obs_space, gymnasium.spaces.Dict) and ACTION_MASK_KEY in obs_space.spaces
        if self.env_has_mask and self.mask_sizes is None:
            raise ConfigError(f"--env={env_name}: the observation has an {ACTION_MASK_KEY!r} but the action space "
                              f"{action_space} is not categorical; allowed: masks for Discrete or MultiDiscrete "
                              f"actions")
        # key -> (env space, cast dtype or None for one-hot of a Discrete); None key = a plain Box observation
        self.parts: dict[str | None, tuple[gymnasium.Space, Any]] = {}
        sfx_spaces: dict[str, gymnasium.Space] = {}
        if isinstance(obs_space, gymnasium.spaces.Dict):
            for key, sub in obs_space.spaces.items():
                if key == ACTION_MASK_KEY:
                    continue
                sfx_spaces[key] = self._add_part(key, sub, env_name)
        else:
            box = self._add_part(None, obs_space, env_name)
            if self.mask_sizes is None:
                self.space: gymnasium.Space = box
                return
            self.parts[OBSERVATION_KEY] = self.parts.pop(None)
            sfx_spaces[OBSERVATION_KEY] = box
        if self.mask_sizes is not None:
            sfx_spaces[ACTION_MASK_KEY] = gymnasium.spaces.Box(0, 1, (sum(self.mask_sizes),), np.int8)
        if not sfx_spaces:
            raise ConfigError(f"--env={env_name}: the observation space {obs_space} holds nothing but an action mask")
        self.space = gymnasium.spaces.Dict(sfx_spaces)

    def _add_part(self, key: str | None, space: gymnasium.Space, env_name: str) -> gymnasium.Space:
        if isinstance(space, gymnasium.spaces.Box):
            box, dtype = _convert_box(space)
            self.parts[key] = (space, dtype)
            return box
        if isinstance(space, gymnasium.spaces.Discrete):  # e.g. rock-paper-scissors: one-hot
            self.parts[key] = (space, None)
            return gymnasium.spaces.Box(0.0, 1.0, (int(space.n),), np.float32)
        where = f"observation key {key!r}" if key is not None else "the observation"
        raise ConfigError(f"--env={env_name}: {where} has space {space}; allowed: Box, Discrete, or a Dict of those")

    @property
    def dict_obs(self) -> bool:
        return isinstance(self.space, gymnasium.spaces.Dict)

    # ----- masks ---------------------------------------------------------------------------

    def all_allowed(self) -> np.ndarray:
        return np.ones(sum(self.mask_sizes), np.int8)

    def sit_out_mask(self) -> np.ndarray:
        """Only the first choice of each head allowed: an agent that does not act this step takes it
        with probability 1 when acting and in the learner, so its importance ratio is exactly 1."""
        mask = np.zeros(sum(self.mask_sizes), np.int8)
        mask[np.cumsum([0] + self.mask_sizes[:-1])] = 1
        return mask

    def env_mask(self, obs: Any, info: dict | None) -> np.ndarray | None:
        """The env's own mask of legal actions (in the observation, or in the info), or None."""
        mask = None
        if self.env_has_mask and isinstance(obs, dict):
            mask = obs.get(ACTION_MASK_KEY)
        if mask is None and info:
            mask = info.get(ACTION_MASK_KEY)
        return None if mask is None else np.asarray(mask, np.int8).reshape(-1)

    def is_illegal(self, action: Any, mask: np.ndarray | None) -> bool:
        """Whether ``action`` (as the env takes it) is one the mask forbids."""
        if mask is None or self.mask_sizes is None or not mask.any():
            return False
        space = self.action_space
        if isinstance(space, gymnasium.spaces.Discrete):
            return not mask[int(action) - int(space.start)]
        offsets = np.cumsum([0] + self.mask_sizes[:-1])
        choices = np.asarray(action).reshape(-1) - np.asarray(space.start).reshape(-1)
        return not bool(np.all(mask[offsets + choices]))

    # ----- observations --------------------------------------------------------------------

    def convert(self, obs: Any, mask: np.ndarray | None = None) -> Any:
        """The env's observation -> sfx's; ``mask``: what to put under ``action_mask`` (the sit-out
        mask when None)."""
        if not self.dict_obs:
            return self._convert_part(None, obs)
        out = {}
        for key in self.parts:
            value = obs if key == OBSERVATION_KEY and not isinstance(obs, dict) else obs[key]
            out[key] = self._convert_part(key, value)
        if self.mask_sizes is not None:
            out[ACTION_MASK_KEY] = self.sit_out_mask() if mask is None else mask
        return out

    def _convert_part(self, key: str | None, value: Any) -> np.ndarray:
        space, dtype = self.parts[key]
        if dtype is None:
            onehot = np.zeros(int(space.n), np.float32)
            onehot[int(value) - int(space.start)] = 1.0
            return onehot
        return np.asarray(value, dtype=dtype)

    def placeholder(self) -> Any:
        """The observation of an agent that is out of the match: zeros, with the sit-out mask."""
        if not self.dict_obs:
            return np.zeros(self.space.shape, self.space.dtype)
        out = {k: np.zeros(s.shape, s.dtype) for k, s in self.space.spaces.items() if k != ACTION_MASK_KEY}
        if self.mask_sizes is not None:
            out[ACTION_MASK_KEY] = self.sit_out_mask()
        return out


def shared_spaces(env: Any, agents: list[str], env_name: str) -> tuple[gymnasium.Space, gymnasium.Space]:
    """The one observation space and one action space of ``agents``; :class:`ConfigError` if they differ."""
    obs_spaces = {a: env.observation_space(a) for a in agents}
    act_spaces = {a: env.action_space(a) for a in agents}
    for kind, by_agent in (("observation", obs_spaces), ("action", act_spaces)):
        first = agents[0]
        differ = [a for a in agents if by_agent[a] != by_agent[first]]
        if differ:
            raise ConfigError(f"--env={env_name}: agents {first} and {differ[0]} have different {kind} spaces "
                              f"({by_agent[first]} and {by_agent[differ[0]]}); sfx needs one {kind} space for all "
                              f"agents it trains (make the others random players with --pettingzoo_random_agents, "
                              f"or pad the spaces, e.g. with a wrapper of your own)")
    return obs_spaces[agents[0]], act_spaces[agents[0]]


def split_agents(possible_agents: list[str], random_agents: list[str], env_name: str) -> list[str]:
    """The agents sfx plays (``possible_agents`` order) once ``random_agents`` are taken out."""
    unknown = [a for a in random_agents if a not in possible_agents]
    if unknown:
        raise ConfigError(f"--pettingzoo_random_agents names {', '.join(unknown)}, not agents of --env={env_name}; "
                          f"allowed: {', '.join(possible_agents)}")
    learners = [a for a in possible_agents if a not in random_agents]
    if not learners:
        raise ConfigError(f"--pettingzoo_random_agents={','.join(random_agents)} leaves no agent for sfx to play in "
                          f"--env={env_name}; allowed: a subset of {', '.join(possible_agents)}")
    return learners


class RandomPlayer:
    """Uniform over the legal actions (the mask, when there is one), from its own seeded generator."""

    def __init__(self, seed: int | None) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, space: gymnasium.Space, mask: np.ndarray | None) -> Any:
        if isinstance(space, gymnasium.spaces.Discrete):
            allowed = np.flatnonzero(mask) if mask is not None and mask.any() else np.arange(int(space.n))
            return int(self.rng.choice(allowed)) + int(space.start)
        if isinstance(space, gymnasium.spaces.MultiDiscrete) and mask is not None and mask.any():
            sizes = categorical_sizes(space)
            heads = np.split(mask, np.cumsum(sizes)[:-1])
            choice = [int(self.rng.choice(np.flatnonzero(h) if h.any() else np.arange(len(h)))) for h in heads]
            return np.asarray(choice, np.int64).reshape(space.shape) + space.start
        space.seed(int(self.rng.integers(2**31)))
        return space.sample()


@dataclass
class AgentMatch:
    """One sfx agent's part of the current match."""

    joined: bool = False       # has been in the match (in the env's agents) at some point
    left: str | None = None    # None while in it; "terminated" or "truncated" once out
    final_obs: Any = None      # its sfx observation when it left (truncation bootstraps from it)
    reward: float = 0.0
    steps: int = 0             # sfx steps while in the match (acting or waiting its turn)
    turns: int = 0             # steps on which it acted
    illegal_moves: int = 0     # actions the env's own mask forbade (0 when sfx honours masks)

    def episode_stats(self, with_masks: bool, with_turns: bool) -> dict[str, float]:
        stats: dict[str, float] = {"reward": self.reward, "len": self.steps}
        if with_turns:
            stats["turns"] = self.turns
        if with_masks:
            stats["illegal_moves"] = self.illegal_moves
        return stats


class PettingZooMatchEnv(MultiAgentEnv):
    """What the Parallel and the AEC adapters share: the agents sfx plays, the shared spaces and their
    view, the random player, and seeding (``reset`` seeds the first match, later matches continue the
    env's random stream). A subclass starts a match in ``_start_match(seed) -> observations``."""

    def __init__(self, env: Any, env_name: str, random_agents: list[str] = (), seed: int | None = None) -> None:
        self.env = env
        self.env_name = env_name
        self.agents = split_agents(list(env.possible_agents), list(random_agents), env_name)
        self.random_agents = [a for a in env.possible_agents if a not in self.agents]
        self.index = {a: i for i, a in enumerate(self.agents)}  # env agent name -> sfx agent index
        self.num_agents = len(self.agents)
        obs_space, self.action_space = shared_spaces(env, self.agents, env_name)
        self.view = AgentView(obs_space, self.action_space, env_name)
        self.observation_space = self.view.space
        self.random_player = RandomPlayer(seed)
        self.default_seed = seed
        self.seeded = False
        self.match: list[AgentMatch] = []

    def reset(self, seed: int | None = None) -> tuple[list[Any], list[dict]]:
        if seed is None and not self.seeded:
            seed = self.default_seed
        if seed is not None:
            self.random_player = RandomPlayer(seed)
            self.seeded = True
        return self._start_match(seed), [{} for _ in range(self.num_agents)]

    def _start_match(self, seed: int | None = None) -> list[Any]:
        raise NotImplementedError

    def _end_match(self, rewards: list[float], infos: list[dict],
                   with_turns: bool) -> tuple[list[Any], list[float], list[bool], list[bool], list[dict]]:
        """The step that ends a match, for every agent: terminated (or truncated where a time limit took it
        out), its final observation, its episode statistics if it joined; the observations are the next
        match's first (envs reset themselves)."""
        terminated, truncated = [], []
        for i, m in enumerate(self.match):
            trunc = m.left == "truncated"
            terminated.append(not trunc)
            truncated.append(trunc)
            infos[i]["final_obs"] = m.final_obs if m.final_obs is not None else self.view.placeholder()
            if m.joined:
                infos[i]["episode"] = m.episode_stats(self.view.mask_sizes is not None, with_turns=with_turns)
        return self._start_match(), rewards, terminated, truncated, infos
