"""One Google Research Football game as an sfx multi-agent env: each controlled left-team player is an agent."""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import warnings
from types import ModuleType
from typing import Any

import gymnasium
import numpy as np

from sfx.envs.football.scenarios import SCENARIOS, scenario_name
from sfx.envs.multi_agent import MultiAgentEnv
from sfx.errors import ConfigError

# SEED RL's --smm_size choices: (width, height) of the super mini map planes
SMM_SIZES: dict[str, tuple[int, int]] = {"default": (96, 72), "medium": (120, 90), "large": (144, 108)}
REPRESENTATIONS = ("extracted", "simple115", "simple115v2")
REWARDS = ("scoring", "scoring,checkpoints")
SMM_PLANES = 4          # left team, right team, ball, active player
STACKED_FRAMES = 4      # gfootball's FrameStack keeps the last 4 observations
SIMPLE115_SIZE = 115
NUM_ACTIONS = 19        # gfootball's default action set
RENDER_WIDTH_DEFAULT = 1280

INSTALL_HINT = ("install it with: scripts/install_football.sh (apt-gets its build dependencies, compiles the C++ "
                "engine, about 25 min on 2 cores) in the sfx checkout, then pip install -e .[football]")


def import_gfootball(env_name: str = "football_") -> ModuleType:
    """``gfootball.env``, imported on first use; :class:`ConfigError` (one line, with the install step) if missing."""
    try:
        importlib.import_module("gfootball_engine")
        # gym (before 0.26, which gfootball 2.10.2 needs) prints a notice that it is unmaintained to stderr and
        # warns about its own deprecations on import, in every worker process: that is gfootball's business
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            module = importlib.import_module("gfootball.env")
        # gfootball logs a line per finished episode at INFO through absl (the "absl" logger): sfx reports episodes
        logging.getLogger("absl").setLevel(logging.WARNING)
        return module
    except ImportError as e:
        raise ConfigError(f"env family football_ (--env={env_name}) needs the optional package gfootball>=2.10.2, "
                          f"which cannot be imported ({type(e).__name__}: {e}); {INSTALL_HINT}") from None


def observation_space(representation: str, stacked: bool, smm_size: str) -> gymnasium.spaces.Box:
    """One agent's observation space: ``uint8 (planes, H, W)`` SMM planes (0 or 255; 16 planes when stacked)
    or a ``float32 (115,)`` vector (``(460,)`` when stacked)."""
    frames = STACKED_FRAMES if stacked else 1
    if representation == "extracted":
        width, height = SMM_SIZES[smm_size]
        return gymnasium.spaces.Box(0, 255, (SMM_PLANES * frames, height, width), np.uint8)
    # positions are in [-1, 1] x [-0.42, 0.42], but directions and a ball above the pitch have no fixed bound
    return gymnasium.spaces.Box(-np.inf, np.inf, (SIMPLE115_SIZE * frames,), np.float32)


class FootballEnv(MultiAgentEnv):
    """A gfootball game in which sfx controls ``left_players`` left-team players, one agent each.

    Observations (per agent): ``extracted`` gives the super mini map (SMM) planes SEED RL trains on,
    ``uint8 (4 * frames, H, W)`` channel-first (gfootball gives ``(H, W, C)``), 0 or 255; ``simple115`` /
    ``simple115v2`` give gfootball's 115-float state vector. With ``stacked`` the last 4 observations are
    concatenated (gfootball's FrameStack, which repeats the first observation of an episode).
    With several agents each one's SMM marks its own player as the active one.

    Rewards: ``scoring`` (+1 for a goal scored by the left team, -1 for one conceded, the same for every
    agent) or ``scoring,checkpoints`` (plus 0.1 for each of 10 zones nearer the opponent's goal that a
    player first reaches with the ball, gfootball's CheckpointRewardWrapper; per agent).

    Episodes end when the scenario says (a goal, the ball out of play or lost in academy scenarios) or
    after the scenario's ``game_duration`` steps, which is a time limit: ``truncated`` (the learner
    bootstraps); any other end is ``terminated``. All agents' episodes end together.
    ``infos[i]['episode']`` has ``reward`` (agent ``i``'s reward sum), ``len`` (agent steps) and ``football_score``
    (goals scored minus goals conceded, whatever the reward flag).

    Seeding: ``reset(seed=s)`` seeds a generator that draws the engine's ``game_engine_random_seed`` for
    every episode (so episodes differ, and the same ``s`` replays the same games for the same actions);
    without a seed the engine draws its own.

    Args:
        scenario: a gfootball scenario name (``academy_empty_goal_close``).
        representation: ``extracted``, ``simple115`` or ``simple115v2``.
        rewards: ``scoring`` or ``scoring,checkpoints``.
        stacked: stack the last 4 observations.
        smm_size: ``default`` (96x72), ``medium`` (120x90), ``large`` (144x108): the SMM planes' size.
        left_players: left-team players sfx controls (agents); gfootball's built-in AI plays the rest.
        frameskip: repeat each action this many engine steps (rewards summed); SEED uses 1.
        render_mode: ``rgb_array`` (``render()`` gives the game's 3D view, ``(H, W, 3)`` uint8) or None.
        render_width: width of rendered frames (height = 0.5625 x width, gfootball's aspect).
        env_name: the ``--env`` name, for error messages.
        seed: used by the first :meth:`reset` that gets no seed of its own.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, scenario: str, representation: str = "extracted", rewards: str = "scoring",
                 stacked: bool = True, smm_size: str = "default", left_players: int = 1, frameskip: int = 1,
                 render_mode: str | None = None, render_width: int = RENDER_WIDTH_DEFAULT,
                 env_name: str = "football_", seed: int | None = None) -> None:
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}")
        if representation not in REPRESENTATIONS:
            raise ValueError(f"representation {representation!r} is not one of {REPRESENTATIONS}")
        if rewards not in REWARDS:
            raise ValueError(f"rewards {rewards!r} is not one of {REWARDS}")
        if not 1 <= left_players <= SCENARIOS[scenario].left_players:
            raise ValueError(f"{scenario} has {SCENARIOS[scenario].left_players} left players, "
                             f"cannot control {left_players}")
        if frameskip < 1:
            raise ValueError(f"frameskip must be >= 1, got {frameskip}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode {render_mode!r} is not supported; use 'rgb_array' or None")
        gfootball_env = import_gfootball(env_name)
        self.scenario = scenario
        self.representation = representation
        self.num_agents = left_players
        self.frameskip = frameskip
        self.render_mode = render_mode
        self.game_duration = SCENARIOS[scenario].game_duration
        options: dict[str, Any] = {}
        if render_mode is not None:
            options.update(render_resolution_x=render_width, render_resolution_y=int(0.5625 * render_width))
        with warnings.catch_warnings():
            # gfootball's wrappers use gym's old step API, which gym warns about once per wrapper
            warnings.simplefilter("ignore", DeprecationWarning)
            self._env = gfootball_env.create_environment(
                env_name=scenario, stacked=stacked, representation=representation, rewards=rewards,
                channel_dimensions=SMM_SIZES[smm_size], number_of_left_players_agent_controls=left_players,
                logdir="", write_goal_dumps=False, write_full_episode_dumps=False, write_video=False,
                render=render_mode is not None, other_config_options=options)
        self.observation_space = observation_space(representation, stacked, smm_size)
        self.action_space = gymnasium.spaces.Discrete(NUM_ACTIONS)
        self._rng: np.random.Generator | None = None
        self._default_seed = seed
        self._steps = 0         # engine steps of this episode (the scenario's time limit counts these)
        self._agent_steps = 0   # sfx steps of this episode (--env_frameskip engine steps each)
        self._returns = np.zeros(left_players)
        self._score = 0.0

    # -- observations and seeds ---------------------------------------------------------------------------------

    def _agent_obs(self, obs: np.ndarray) -> list[np.ndarray]:
        """gfootball's observation (one agent's, or ``(agents, ...)``) -> a list of one per agent in sfx's layout."""
        obs = np.asarray(obs)
        if self.num_agents == 1:
            obs = obs[None]
        if self.representation == "extracted":
            return [np.ascontiguousarray(o.transpose(2, 0, 1), dtype=np.uint8) for o in obs]
        return [np.asarray(o, dtype=np.float32).reshape(-1) for o in obs]

    def _seed_next_episode(self) -> None:
        if self._rng is None:
            return
        # gfootball reads game_engine_random_seed from its config at every reset; create_environment's
        # other_config_options sets it once, which would replay one game forever, so each episode gets a new one
        config = self._env.unwrapped._config
        seed = int(self._rng.integers(0, 2_000_000_000))
        config["game_engine_random_seed"] = seed
        # gfootball derives this from the seed of the env's first episode (drawn unseeded when the env is made)
        # and keeps it: derived from each episode's seed instead, as gfootball does for that first one.
        # (Reading config[...] back would give the previous episode's value: its per-episode values come first.)
        config["reverse_team_processing"] = bool(seed % 2)

    def reset(self, seed: int | None = None) -> tuple[list[Any], list[dict]]:
        if seed is None and self._rng is None:
            seed = self._default_seed
        if seed is not None:
            self._rng = np.random.default_rng(seed)
            self.action_space.seed(seed)
        self._seed_next_episode()
        obs = self._env.reset()
        self._steps, self._agent_steps, self._score = 0, 0, 0.0
        self._returns[:] = 0.0
        return self._agent_obs(obs), [{} for _ in range(self.num_agents)]

    # -- stepping -----------------------------------------------------------------------------------------------

    def step(self, actions: list[Any]) -> tuple[list[Any], list[float], list[bool], list[bool], list[dict]]:
        if len(actions) != self.num_agents:
            raise ValueError(f"{self.num_agents} agents take {self.num_agents} actions, got {len(actions)}")
        action: Any = int(actions[0]) if self.num_agents == 1 else [int(a) for a in actions]
        rewards = np.zeros(self.num_agents)
        done = False
        for _ in range(self.frameskip):
            obs, reward, done, info = self._env.step(action)
            rewards += np.asarray(reward, dtype=np.float64).reshape(-1)
            self._score += float(info["score_reward"])
            self._steps += 1
            if done:
                break
        self._agent_steps += 1
        self._returns += rewards
        truncated = done and self._steps >= self.game_duration
        terminated = done and not truncated
        agent_obs = self._agent_obs(obs)
        infos: list[dict] = [{} for _ in range(self.num_agents)]
        if done:
            for i, agent_info in enumerate(infos):
                agent_info["final_obs"] = agent_obs[i]
                agent_info["episode"] = {"reward": float(self._returns[i]), "len": self._agent_steps,
                                         "football_score": self._score}
            next_obs, _ = self.reset()
            agent_obs = next_obs
        return agent_obs, [float(r) for r in rewards], [terminated] * self.num_agents, \
            [truncated] * self.num_agents, infos

    def render(self) -> Any:
        if self.render_mode != "rgb_array":
            return None
        return np.ascontiguousarray(self._env.render(mode="rgb_array"))

    def close(self) -> None:
        self._env.close()

    def __repr__(self) -> str:
        return f"FootballEnv({self.scenario}, {self.representation}, {self.num_agents} agent(s))"
