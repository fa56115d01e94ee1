"""One single-player VizDoom game as a gymnasium env.

Observations: ``Box(0, 255, (C, res_h, res_w), uint8)``, C = 3 (rgb) or 1 (gray); with
``measurements=True`` a ``Dict`` of that frame under ``"obs"`` and the game variables under
``"measurements"`` (float32, in the order of :attr:`DoomEnv.measurement_names`: the scenario's own
variables, then the tracked ones: HEALTH, ARMOR, SELECTED_WEAPON_AMMO, KILLCOUNT, ITEMCOUNT,
DAMAGECOUNT, DEATHCOUNT, each listed once), which sfx's models read with their own small MLP
beside the image encoder.

Episode ends (VizDoom's ``is_episode_finished()``):

* truncated: the scenario's ``episode_timeout`` ran out with the player alive
  (``is_episode_timeout_reached()``); the learner bootstraps from the last frame.
* terminated: anything else: the player died (``is_player_dead()``) or reached the scenario's goal
  (e.g. basic's monster killed, my_way_home's vest taken).

The game has no screen once its episode has finished, so the observation returned on the last
step of an episode is the last frame the agent saw.

Episode statistics (``info['episode_extra_stats']`` on the last step, averaged by sfx under
``episode/*``): kills, health, armor, ammo, items, damage (at the end of the episode), died and
timeout (0/1), and with reward shaping the episode sum of each weighted component as
``shaping_<name>``.
"""

from __future__ import annotations

import weakref
from typing import Any, Mapping, Sequence

import gymnasium
import numpy as np

from sfx.envs.doom.actions import DoomActions
from sfx.envs.doom.game import GameSettings, close_game, create_game
from sfx.envs.doom.reward_shaping import TRACKED_VARIABLES, RewardShaping
from sfx.envs.doom.scenarios import DoomScenario

# episode statistic -> tracked game variable read at the end of the episode
_STAT_VARIABLES = {"kills": "KILLCOUNT", "health": "HEALTH", "armor": "ARMOR", "ammo": "SELECTED_WEAPON_AMMO",
                   "items": "ITEMCOUNT", "damage": "DAMAGECOUNT"}


class DoomEnv(gymnasium.Env):
    """A VizDoom scenario played by one agent.

    Args:
        scenario: which scenario.
        settings: resolution, pixel format, seed, extra engine arguments (see :class:`GameSettings`).
        frameskip: game tics per agent step (the action is held; rewards are summed).
        action_space: ``discrete`` or ``tuple`` (see :mod:`sfx.envs.doom.actions`).
        measurements: observe the game variables too (a Dict observation, see the module docstring).
        reward_shaping: component name -> weight (see :mod:`sfx.envs.doom.reward_shaping`).
        render_mode: ``rgb_array`` (the observation as HWC) or ``None``.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 35}

    def __init__(self, scenario: DoomScenario, settings: GameSettings, frameskip: int = 4,
                 action_space: str = "discrete", measurements: bool = False,
                 reward_shaping: Mapping[str, float] | None = None, render_mode: str | None = None) -> None:
        if frameskip < 1:
            raise ValueError(f"frameskip must be >= 1, got {frameskip}")
        self.scenario = scenario
        self.frameskip = int(frameskip)
        self.measurements = bool(measurements)
        self.reward_shaping = RewardShaping(reward_shaping)
        self.render_mode = render_mode
        self.game, self.frames, self.workdir = create_game(scenario, settings)
        # an env dropped without close() still stops its engine and deletes its folder
        self._closer = weakref.finalize(self, close_game, self.game, self.workdir)
        self.actions = DoomActions([b.name for b in self.game.get_available_buttons()], action_space)
        self.action_space = self.actions.space
        frame_space = gymnasium.spaces.Box(0, 255, self.frames.shape, np.uint8)
        self.measurement_names: list[str] = [v.name for v in self.game.get_available_game_variables()]
        if self.measurements:
            self.observation_space: gymnasium.Space = gymnasium.spaces.Dict({
                "obs": frame_space,
                "measurements": gymnasium.spaces.Box(-np.inf, np.inf, (len(self.measurement_names),), np.float32)})
        else:
            self.observation_space = frame_space
        self._tracked_index = [self.measurement_names.index(n) for n in TRACKED_VARIABLES]
        self._obs = np.zeros(self.frames.shape, np.uint8)
        self._variables = np.zeros(len(self.measurement_names), np.float64)
        self._shaping_sums: dict[str, float] = {}

    # -- gymnasium API -------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self.game.set_seed(int(seed) % (2 ** 32))
        self.game.new_episode()
        for command in self.scenario.episode_commands:
            self.game.send_game_command(command)
        self._read_state()
        self._shaping_sums = {name: 0.0 for name in self.reward_shaping.weights}
        return self._observation(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        before = self._tracked()
        reward = float(self.game.make_action(self.actions.to_buttons(action), self.frameskip))
        finished = self.game.is_episode_finished()
        died = self.game.is_player_dead()
        if finished:
            # no state after the end: the variables are read one by one, the frame stays the last one
            for i, v in enumerate(self.game.get_available_game_variables()):
                self._variables[i] = self.game.get_game_variable(v)
        else:
            self._read_state()
        if self.reward_shaping.weights:
            values = self.reward_shaping.components(before, self._tracked(), died)
            for name, weight in self.reward_shaping.weights.items():
                shaped = weight * values[name]
                self._shaping_sums[name] = self._shaping_sums.get(name, 0.0) + shaped
                reward += shaped
        truncated = finished and not died and self.game.is_episode_timeout_reached()
        terminated = finished and not truncated
        info = {}
        if finished:
            info["episode_extra_stats"] = self._episode_stats(died, truncated)
        return self._observation(), reward, terminated, truncated, info

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        frame = self._obs.transpose(1, 2, 0)
        return np.repeat(frame, 3, axis=2) if frame.shape[2] == 1 else np.ascontiguousarray(frame)

    def get_reward_shaping(self) -> dict[str, float]:
        """The shaping weights (component -> weight); PBT mutates them through :meth:`set_reward_shaping`."""
        return dict(self.reward_shaping.weights)

    def set_reward_shaping(self, weights: dict[str, float]) -> None:
        self.reward_shaping = RewardShaping(weights)

    def close(self) -> None:
        closer = getattr(self, "_closer", None)
        if closer is not None:
            closer()  # runs close_game once, however often close() is called

    # -- internals -----------------------------------------------------------------------------
    def _read_state(self) -> None:
        state = self.game.get_state()
        self._obs = self.frames(state.screen_buffer)
        self._variables[:] = state.game_variables

    def _tracked(self) -> dict[str, float]:
        return {name: float(self._variables[i]) for name, i in zip(TRACKED_VARIABLES, self._tracked_index)}

    def _observation(self) -> Any:
        if not self.measurements:
            return self._obs
        return {"obs": self._obs, "measurements": self._variables.astype(np.float32)}

    def _episode_stats(self, died: bool, truncated: bool) -> dict[str, float]:
        tracked = self._tracked()
        stats = {stat: tracked[var] for stat, var in _STAT_VARIABLES.items()}
        stats["died"] = float(died)
        stats["timeout"] = float(truncated)
        for name, total in self._shaping_sums.items():
            stats[f"shaping_{name}"] = total
        return stats

    @property
    def button_names(self) -> Sequence[str]:
        """The game's buttons, in the order of the button vectors."""
        return self.actions.buttons
