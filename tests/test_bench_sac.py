"""bench/sac.py's pure parts: the bars read off a reward curve, the window's start, the tasks' settings."""

from __future__ import annotations

import pytest

from bench.sac import HALFCHEETAH_FLAGS, TASKS, crossings, first_full, task_bars
from sfx.registries import parse_args


def test_crossings_take_the_first_point_at_or_above_each_bar_once_the_window_is_full():
    points = [(1000, 1.0, 900.0), (2000, 2.0, 1500.0), (3000, 3.0, 800.0), (4000, 4.5, 2100.0), (5000, 6.0, 1900.0)]
    assert crossings(points, (1000.0, 2000.0, 3000.0), 0) == {1000.0: (2000, 2.0), 2000.0: (4000, 4.5),
                                                              3000.0: (None, None)}
    # a bar is met by an equal average; points before the window held its episodes do not count
    assert crossings(points, [900.0], 0) == {900.0: (1000, 1.0)}
    assert crossings(points, [900.0, 1000.0], 3000) == {900.0: (4000, 4.5), 1000.0: (4000, 4.5)}
    # a window that never filled: no bar reached; no seconds (SB3 rows without curve_seconds) stay None
    assert crossings(points, [0.0], None) == {0.0: (None, None)}
    assert crossings([(10, None, 5.0)], [1.0], 0) == {1.0: (10, None)}
    assert crossings([], [1.0], 0) == {1.0: (None, None)}


def test_first_full_is_the_first_summary_with_the_window_of_episodes():
    episodes = [(1000, 0.0, 1.0), (2000, 0.0, 2.0), (10_004, 0.0, 10.0), (11_000, 0.0, 11.0)]
    assert first_full(episodes, 10) == 10_004
    assert first_full(episodes, 1) == 1000
    assert first_full(episodes, 12) is None
    assert first_full([], 1) is None


def test_task_bars_stop_and_read_bars():
    assert task_bars("halfcheetah", None, None) == (None, (500.0, 1000.0, 1500.0, 2000.0, 2500.0, 3000.0))
    assert task_bars("halfcheetah", None, [500.0]) == (None, (500.0,))
    assert task_bars("invertedpendulum", None, None) == (800.0, (800.0,))
    assert task_bars("invertedpendulum", 50.0, None) == (50.0, (50.0,))
    assert task_bars("invertedpendulum", 50.0, [10.0, 50.0]) == (50.0, (10.0, 50.0))


@pytest.mark.parametrize("task", sorted(TASKS))
def test_each_tasks_flags_parse_and_its_window_is_sfx_stats_avg(task, tmp_path):
    spec = TASKS[task]
    cfg = parse_args([*spec.flags, f"--train_dir={tmp_path}", "--experiment=x"], resume=False)
    assert cfg.stats_avg == spec.window  # the same window on SB3's side (--window)
    assert cfg.replay_ratio / cfg.batch_size == 1.0  # one gradient step per env step, SB3's
    assert (cfg.learner_main_loop_num_cores, cfg.serial_mode) == (0, True)  # the bench's --learner_threads sets it


def test_halfcheetah_mirrors_the_rl_zoo_entry():
    cfg = parse_args([*HALFCHEETAH_FLAGS, "--experiment=x"], resume=False)
    assert cfg.learning_starts == 10_000 and cfg.batch_size == 256 and cfg.replay_buffer_size == 1_000_000
    assert (cfg.actor_learning_rate, cfg.critic_learning_rate, cfg.alpha_learning_rate) == (3e-4, 3e-4, 3e-4)
    assert (cfg.tau, cfg.gamma, cfg.num_envs_per_worker, cfg.num_workers) == (0.005, 0.99, 1, 1)
    spec = TASKS["halfcheetah"]
    assert (spec.gym_id, spec.hyper_from, spec.bar, spec.max_steps, spec.window) == (
        "HalfCheetah-v5", "HalfCheetah-v4", None, 50_000, 10)
