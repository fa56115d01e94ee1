"""The vector seam's Python implementation (sfx.envs.vector.PythonVectorEnv) against the envs it steps one by one."""

import gymnasium
import numpy as np
import pytest

from sfx.algo.distributions import action_to_env
from sfx.envs.multi_agent import MultiAgentEnv, SingleAgentEnvAdapter
from sfx.envs.vector import AgentEvent, PythonVectorEnv, env_actions


def _cartpole(seed: int) -> SingleAgentEnvAdapter:
    return SingleAgentEnvAdapter(gymnasium.make("CartPole-v1", max_episode_steps=20), seed=seed)


def test_the_vector_gives_what_each_env_gives_with_auto_reset_events():
    """Two vectors' worth of CartPole: the vector's arrays equal the same envs stepped one by one; episode ends come
    as events with the final observation and the episode's statistics, the next obs being the new episode's."""
    n = 3
    vector = PythonVectorEnv(lambda e: _cartpole(e), n)
    alone = [_cartpole(e) for e in range(n)]
    obs = vector.reset([10, 11, 12])
    expected = np.stack([env.reset(seed=10 + e)[0][0] for e, env in enumerate(alone)])
    np.testing.assert_array_equal(obs, expected)
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(70):
        rows = rng.integers(2, size=(n, 1)).astype(np.float32)
        step = vector.step(rows)
        for e, env in enumerate(alone):
            o, r, term, trunc, infos = env.step([int(rows[e, 0])])
            np.testing.assert_array_equal(step.obs[e], o[0])
            assert step.rewards[e] == r[0] and step.terminated[e] == term[0] and step.truncated[e] == trunc[0]
            if term[0] or trunc[0]:
                ends += 1
                event = step.events[e]
                np.testing.assert_array_equal(event.final_obs, infos[0]["final_obs"])
                assert event.episode == infos[0]["episode"] and not event.crashed
            else:
                assert e not in step.events
        assert step.active is None
    assert ends >= n  # every env ended at least one 20-step episode
    vector.close()


class _TwoAgents(MultiAgentEnv):
    """Two agents; agent 1 sits out every other step; crashes on the step where ``crash_at`` is reached."""

    num_agents = 2
    observation_space = gymnasium.spaces.Dict({"a": gymnasium.spaces.Box(0, 9, (2,), np.float32),
                                               "b": gymnasium.spaces.Discrete(5)})
    action_space = gymnasium.spaces.Discrete(3, start=1)
    task_names = ("x", "y")

    def __init__(self, task_id: int, crash_at: int | None = None) -> None:
        self.task_id = task_id
        self.crash_at = crash_at
        self.t = 0
        self.actions: list = []

    def _obs(self, j: int) -> dict:
        return {"a": np.array([self.t, j], np.float32), "b": self.t % 5}

    def reset(self, seed=None):
        self.t = 0
        return [self._obs(0), self._obs(1)], [{}, {}]

    def step(self, actions):
        self.actions.append(list(actions))
        self.t += 1
        if self.crash_at is not None and self.t >= self.crash_at:
            raise RuntimeError("engine died")
        infos = [{}, {"is_active": self.t % 2 == 0}]
        return [self._obs(0), self._obs(1)], [1.0, 2.0], [False, False], [False, False], infos


def test_dict_observations_inactive_agents_and_a_crashed_env_made_anew():
    made = []

    def make(e):
        env = _TwoAgents(task_id=e, crash_at=2 if e == 1 and not made.count(1) else None)
        made.append(e)
        return env

    vector = PythonVectorEnv(make, 2, name="test split")
    assert vector.num_agents_total == 4 and list(vector.task_ids) == [0, 1]
    obs = vector.reset([None, None])
    assert set(obs) == {"a", "b"} and obs["a"].shape == (4, 2)
    step = vector.step(np.array([[0], [1], [2], [0]], np.float32))
    # Discrete(start=1): stored choice + start, agent order env-major
    assert vector.envs[0].actions[-1] == [1, 2] and vector.envs[1].actions[-1] == [3, 1]
    np.testing.assert_array_equal(step.active, [True, False, True, False])
    np.testing.assert_array_equal(step.obs["a"][:, 1], [0, 1, 0, 1])
    assert step.events == {}
    step = vector.step(np.zeros((4, 1), np.float32))  # env 1 crashes and is made anew
    assert vector.env_errors == 1 and "engine died" in vector.last_env_error
    assert made == [0, 1, 1]
    assert step.events == {2: AgentEvent(crashed=True), 3: AgentEvent(crashed=True)}
    np.testing.assert_array_equal(step.terminated, [False, False, True, True])
    np.testing.assert_array_equal(step.active, [True, True, False, False])
    np.testing.assert_array_equal(step.rewards, [1.0, 2.0, 0.0, 0.0])
    np.testing.assert_array_equal(step.obs["a"][2:, 0], [0, 0])  # the new env's first observations
    vector.close()


@pytest.mark.parametrize("space", [gymnasium.spaces.Discrete(4, start=-1),
                                   gymnasium.spaces.Tuple([gymnasium.spaces.Discrete(3), gymnasium.spaces.Discrete(2)]),
                                   gymnasium.spaces.MultiDiscrete([3, 4]),
                                   gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)])
def test_env_actions_are_action_to_env_row_by_row(space):
    rng = np.random.default_rng(3)
    k = 1 if isinstance(space, gymnasium.spaces.Discrete) else 2
    rows = (rng.integers(2, size=(6, k)) if not isinstance(space, gymnasium.spaces.Box)
            else rng.normal(size=(6, k)) * 2).astype(np.float32)
    batch = env_actions(space, rows)
    for got, row in zip(batch, rows):
        want = action_to_env(space, row)
        assert type(got) is type(want)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
