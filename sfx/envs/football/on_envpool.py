"""The ``football_`` family on EnvPool (``--env_backend=envpool``, the family's default): Google Research Football's
engine stepped in EnvPool's C++ threads, no engine build (``pip install -e .[envpool]``).

What EnvPool 1.2.5 offers, and so what this backend serves: the super mini map (4 planes, 72x96, one left player
controlled), the scoring reward (the change of the goal difference), gfootball's 19 actions and the scenarios'
time limits. sfx adds SEED RL's stacking itself (:class:`StackedPlanes`: the last 4 maps, 16 planes, the first
map of an episode repeated, as gfootball's FrameStack does), so ``--football_stacked`` means the same on both
backends. Refused in one line, with the Python backend named as the way to get them: ``simple115`` /
``simple115v2``, ``scoring,checkpoints``, another ``--football_smm_size``, several left players, rendering
(``sfx.enjoy --save_video``) and ``--env_frameskip`` other than 1.

Time limits: the scenario's ``game_duration`` agent steps end an episode as truncated (the learner bootstraps),
as on the Python backend. EnvPool ends an episode one step after its ``max_episode_steps`` (measured on 1.2.5:
``max_episode_steps=20`` truncates on the 21st step), so the pool is given ``game_duration - 1``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sfx.envs.envpool import check_envpool_cfg, not_served, pool_threads, require_envpool
from sfx.envs.envpool.families import seeds_for
from sfx.envs.envpool.vector import EnvPoolVector
from sfx.envs.football.env import STACKED_FRAMES, SMM_PLANES, observation_space
from sfx.envs.football.scenarios import PREFIX, SCENARIOS, check_scenario, scenario_name
from sfx.envs.vector import VectorStep

PYTHON_BACKEND = "--env_backend=python (gfootball built by scripts/install_football.sh)"


def football_task_id(scenario: str) -> str:
    """``academy_empty_goal_close`` -> EnvPool's ``gfootball/academy_empty_goal_close-v1``."""
    return f"gfootball/{scenario}-v1"


def football_served() -> list[str]:
    """The ``football_`` names EnvPool serves."""
    tasks = set(require_envpool().list_all_envs())
    return [PREFIX + s for s in SCENARIOS if football_task_id(s) in tasks]


def football_options(cfg: Any) -> tuple[str, dict[str, Any]]:
    """``--env`` and the ``--football_*`` flags -> (EnvPool task, its config); :class:`ConfigError` in one line for
    what only the Python backend does."""
    check_scenario(cfg.env)
    scenario = scenario_name(cfg.env)
    task = football_task_id(scenario)
    check_envpool_cfg(cfg, task, football_served())
    refused = [("--football_representation", cfg.football_representation, "extracted", "extracted (the super mini "
                "map; EnvPool has no 115-float state)"),
               ("--football_rewards", cfg.football_rewards, "scoring", "scoring (EnvPool has no checkpoint reward)"),
               ("--football_smm_size", cfg.football_smm_size, "default", "default (EnvPool draws 96x72 maps)"),
               ("--football_left_players", cfg.football_left_players, 1, "1 (EnvPool controls one player)"),
               ("--env_frameskip", cfg.env_frameskip, 1, "1 (SEED RL's setting; EnvPool does not repeat actions)")]
    for flag, value, allowed, why in refused:
        if value != allowed:
            raise not_served(flag, value, f"{why}; or {PYTHON_BACKEND}")
    # one step less: EnvPool truncates one step after its limit (see the module docstring)
    return task, {"max_episode_steps": SCENARIOS[scenario].game_duration - 1}


def _channels_first(raw: np.ndarray) -> np.ndarray:
    """EnvPool's maps ``[n, H, W, 4]`` -> sfx's ``[n, 4, H, W]``."""
    return np.ascontiguousarray(raw.transpose(0, 3, 1, 2))


def _goal_difference(ended: np.ndarray, final_obs: Any, rewards: np.ndarray, terminated: np.ndarray,
                     info: dict) -> list[dict]:
    score = np.asarray(info["score"])[ended]  # [left goals, right goals] at the episode's end
    return [{"football_score": float(left - right)} for left, right in score.tolist()]


class StackedPlanes(EnvPoolVector):
    """An EnvPool football pool whose observations are the last :data:`STACKED_FRAMES` maps, oldest first
    (``[n, 16, H, W]``); an episode's first map fills every place, and an ended episode's ``final_obs`` is its
    last stack."""

    def reset(self, seeds: list[int | None]) -> Any:
        first = super().reset(seeds)
        self._stack = np.tile(first, (1, STACKED_FRAMES, 1, 1))
        return self._stack

    def step_wait(self) -> VectorStep:
        step = super().step_wait()
        maps = step.obs  # the new maps; an ended env's is its next episode's first
        stack = np.concatenate([self._stack[:, SMM_PLANES:], maps], axis=1)
        events = step.events
        if events:
            events = dict(events)
            for e, event in events.items():
                last = np.concatenate([self._stack[e, SMM_PLANES:], event.final_obs], axis=0)
                events[e] = event._replace(final_obs=last)
                stack[e] = np.tile(maps[e], (STACKED_FRAMES, 1, 1))
        self._stack = stack
        return step._replace(obs=stack, events=events)


def make_football_pool(cfg: Any, env_configs: list[dict], stack: bool) -> EnvPoolVector:
    """A pool of ``len(env_configs)`` envs of ``--env`` (the rollout workers' splits, and one-env pools for the
    probe, the evaluator and sfx.enjoy); ``stack``: the last 4 maps (``--football_stacked``, resolved)."""
    task, options = football_options(cfg)
    cls = StackedPlanes if stack else EnvPoolVector
    return cls(task, seeds_for(cfg, env_configs), options, pool_threads(cfg, len(env_configs)),
               observation_space=observation_space("extracted", stack, "default"), obs_fn=_channels_first,
               extra_stats_fn=_goal_difference, name=f"envpool {task}")
