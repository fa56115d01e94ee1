"""PolicyStats and the --stop_at_reward rule."""

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
