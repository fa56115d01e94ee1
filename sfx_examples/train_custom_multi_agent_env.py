"""A custom multi-agent env: two agents on one grid, each walking to its own goal, one shared policy.

Run::

    python -m sfx_examples.train_custom_multi_agent_env                  # ~30 s on 2 CPU cores
    python -m sfx_examples.train_custom_multi_agent_env --num_policies=2 # one policy per agent slot

The env follows :class:`sfx.envs.MultiAgentEnv`: every call takes and returns lists indexed by
agent, all agents share one observation and one action space, and the env resets itself.

A match ends when both agents reached their goals or after ``max_steps``. An agent that reached its
goal early sits out the rest of the match: ``infos[i]['is_active']`` is False for it, its actions
are ignored and its reward is 0. sfx's learner leaves such samples out of the loss (they carry
nothing to learn), so a finished agent does not dilute the batch. At the end of a match each agent
gets ``terminated`` (it reached its goal) or ``truncated`` (time ran out: the learner bootstraps
from ``infos[i]['final_obs']``), and ``infos[i]['episode']`` with its reward, length and this
env's extra statistics, which sfx averages and writes to TensorBoard next to the reward.
"""

from __future__ import annotations

import sys
from typing import Any

import gymnasium
import numpy as np

import sfx.train
from sfx.envs import MultiAgentEnv, register_env
from sfx_examples._cli import with_defaults

ENV_NAME = "two_agent_goals"


class TwoAgentGoalsEnv(MultiAgentEnv):
    """Two agents on a ``size x size`` grid; agent ``i`` is rewarded for reaching goal ``i``.

    Agents block each other (a move onto the other agent's cell fails), which is what makes the
    env multi-agent. Observation of agent ``i`` (float32, in [0, 1]): its position, its goal, the
    other agent's position (each as row/col divided by ``size - 1``) and whether it still plays.
    Actions: 0 stay, 1 up, 2 down, 3 left, 4 right. Reward: +1 on reaching the goal, -0.01 per
    step while playing.
    """

    num_agents = 2
    MOVES = np.array([(0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)])

    def __init__(self, size: int = 5, max_steps: int = 30, seed: int | None = None) -> None:
        self.size, self.max_steps = size, max_steps
        self.observation_space = gymnasium.spaces.Box(0.0, 1.0, (7,), np.float32)
        self.action_space = gymnasium.spaces.Discrete(len(self.MOVES))
        self.rng = np.random.default_rng(seed)
        self.pos = np.zeros((2, 2), np.int64)
        self.goal = np.zeros((2, 2), np.int64)
        self.active = np.ones(2, bool)
        self.rewards = np.zeros(2)
        self.blocked = np.zeros(2, np.int64)
        self.steps = 0

    def _obs(self) -> list[np.ndarray]:
        scale = self.size - 1
        return [np.concatenate([self.pos[i] / scale, self.goal[i] / scale, self.pos[1 - i] / scale,
                                [float(self.active[i])]]).astype(np.float32) for i in range(2)]

    def _new_match(self) -> None:
        # both agents and both goals on distinct cells
        cells = self.rng.choice(self.size * self.size, size=4, replace=False)
        rows, cols = np.divmod(cells, self.size)
        self.pos = np.stack([rows[:2], cols[:2]], axis=1)
        self.goal = np.stack([rows[2:], cols[2:]], axis=1)
        self.active[:] = True
        self.rewards[:] = 0.0
        self.blocked[:] = 0
        self.steps = 0

    def reset(self, seed: int | None = None) -> tuple[list[np.ndarray], list[dict]]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self._new_match()
        return self._obs(), [{"is_active": True} for _ in range(2)]

    def step(self, actions: list[Any]) -> tuple[list, list[float], list[bool], list[bool], list[dict]]:
        self.steps += 1
        rewards = [0.0, 0.0]
        for i in self.rng.permutation(2):  # random order: neither agent always moves first
            if not self.active[i]:
                continue
            target = self.pos[i] + self.MOVES[int(actions[i])]
            if (target < 0).any() or (target >= self.size).any():
                target = self.pos[i]
            elif (target == self.pos[1 - i]).all() and int(actions[i]) != 0:
                target = self.pos[i]
                self.blocked[i] += 1
            self.pos[i] = target
            rewards[i] = -0.01
            if (target == self.goal[i]).all():
                rewards[i] = 1.0
                self.active[i] = False
        self.rewards += rewards
        # is_active of this step: whether the agent's action counted (it did on the step it arrived)
        infos: list[dict] = [{"is_active": bool(self.active[i] or rewards[i] != 0.0)} for i in range(2)]

        match_over = not self.active.any() or self.steps >= self.max_steps
        if not match_over:
            return self._obs(), rewards, [False, False], [False, False], infos

        terminated = [not bool(a) for a in self.active]  # reached the goal
        truncated = [bool(a) for a in self.active]       # still walking when time ran out
        final_obs = self._obs()
        for i in range(2):
            infos[i]["final_obs"] = final_obs[i]
            infos[i]["episode"] = {"reward": float(self.rewards[i]), "len": self.steps,
                                   "reached_goal": float(terminated[i]), "blocked_moves": float(self.blocked[i])}
        self._new_match()
        return self._obs(), rewards, terminated, truncated, infos


def make_two_agent_goals(full_env_name: str, cfg: Any, env_config: dict,
                         render_mode: str | None = None) -> TwoAgentGoalsEnv:
    """sfx's env factory; a MultiAgentEnv is used as it is (seeded here from sfx's per-env seed)."""
    from sfx.envs import env_seed

    return TwoAgentGoalsEnv(seed=env_seed(cfg, env_config))


# at the top level: the worker processes import this module again and need the env there too
register_env(ENV_NAME, make_two_agent_goals, default_overrides={
    "encoder_type": "mlp", "hidden_size": 64, "use_rnn": False,
    "rollout": 32, "recurrence": 32, "batch_size": 512, "learning_rate": 1e-3,
})

DEFAULT_ARGS = [
    f"--env={ENV_NAME}", "--experiment=two_agent_goals_example", "--train_dir=./train_dir", "--device=cpu",
    "--num_workers=2", "--num_envs_per_worker=4", "--train_for_env_steps=150000",
]


def main(argv: list[str] | None = None) -> int:
    """Train on TwoAgentGoalsEnv; ``argv`` (default ``sys.argv[1:]``) adds or replaces sfx.train flags."""
    return sfx.train.main(with_defaults(DEFAULT_ARGS, argv))


if __name__ == "__main__":
    sys.exit(main())
