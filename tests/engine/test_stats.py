"""PolicyStats and the --stop_at_reward rule."""

import pytest

from sfx.engine.stats import PolicyStats, reward_target_reached


def stats_with(rewards, stats_avg=3):
    s = PolicyStats(stats_avg)
    for r in rewards:
        s.add_episode({"policy": 0, "reward": r, "len": 10})
    return s


def test_full_mean_waits_for_stats_avg_episodes():
    assert stats_with([5.0, 7.0]).full_mean("reward", 3) is None
    assert stats_with([5.0, 7.0, 9.0]).full_mean("reward", 3) == 7.0
    # only the newest stats_avg episodes count
    assert stats_with([-100.0, 5.0, 7.0, 9.0]).full_mean("reward", 3) == 7.0
    assert stats_with([]).full_mean("reward", 3) is None


def test_reward_target_reached_names_the_first_policy_at_the_target():
    low, high = stats_with([1.0, 2.0, 3.0]), stats_with([10.0, 10.0, 13.0])
    assert reward_target_reached([low, high], None, 3) is None
    assert reward_target_reached([low, high], 20.0, 3) is None
    assert reward_target_reached([low, high], 11.0, 3) == (1, 11.0)
    assert reward_target_reached([low, high], 2.0, 3) == (0, 2.0)
    # too few episodes: not reached, however good they are
    assert reward_target_reached([stats_with([50.0, 50.0])], 1.0, 3) is None


def test_per_task_curves_and_the_suite_score():
    """A multi-task policy: each task's reward / len over its own last episodes, its human-normalised score
    where one exists (Atari-57 here), and the suite's mean / median / capped mean over those tasks; PBT can
    rank by a suite score."""
    from types import SimpleNamespace

    from sfx.pbt.population import PopulationManager

    stats = PolicyStats(stats_avg=2, task_names=("atari_pong", "atari_breakout", "gym_CartPole-v1"))
    for task, reward in ((0, 14.6), (0, 14.6), (1, 10.0), (1, 22.2), (2, 500.0), (0, 50.0)):
        stats.add_episode({"policy": 0, "task": task, "reward": reward, "len": 10.0 * (task + 1)})
    out = stats.pop_summaries()
    assert out["task/atari_pong/reward"] == pytest.approx((14.6 + 50.0) / 2)  # the last 2 of pong's 3
    assert out["task/atari_breakout/reward"] == pytest.approx(16.1) and out["task/gym_CartPole-v1/len"] == 30.0
    pong = 100 * ((14.6 + 50.0) / 2 + 20.7) / (14.6 + 20.7)
    assert out["task/atari_pong/hns"] == pytest.approx(pong)
    assert out["task/atari_breakout/hns"] == pytest.approx(50.0)
    assert "task/gym_CartPole-v1/hns" not in out  # no human baseline
    assert out["suite/hns_mean"] == pytest.approx((pong + 50.0) / 2)
    assert out["suite/hns_mean_capped"] == pytest.approx((100.0 + 50.0) / 2)
    assert "task" not in str([k for k in out if k.startswith("episode/")])  # the task id is not an episode stat
    manager = SimpleNamespace(cfg=SimpleNamespace(pbt_target_objective="suite/hns_mean_capped"))
    assert PopulationManager.objective(manager, stats) == pytest.approx(75.0)


def test_one_task_shows_no_task_curves():
    stats = PolicyStats(stats_avg=2, task_names=("gym_CartPole-v1",))
    stats.add_episode({"policy": 0, "task": 0, "reward": 5.0, "len": 5.0})
    assert not [k for k in stats.pop_summaries() if k.startswith(("task/", "suite/"))]
