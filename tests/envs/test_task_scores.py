"""Human-normalised scores of tasks (Atari-57 table, DMLab-30 delegation) and suite scores, by hand."""

import math
import subprocess
import sys

import pytest

from sfx.envs.atari.games import ATARI_57, check_game
from sfx.envs.dmlab import levels
from sfx.envs.task_scores import ATARI_57_BASELINES, atari_baselines, human_normalized_score, suite_scores


@pytest.mark.parametrize("task, raw, expected", [
    ("atari_pong", 14.6, 100.0),                       # random -20.7, human 14.6
    ("atari_pong", -20.7, 0.0),
    ("atari_pong", 0.0, 100 * 20.7 / 35.3),
    ("atari_breakout", 59.3, 200.0),                   # random 1.7, human 30.5: 1.7 + 2 * 28.8
    ("atari_space_invaders", 148.0 + 1520.7 / 2, 50.0),  # random 148.0, human 1668.7
    ("atari_skiing", -4336.9, 100.0),                  # both baselines negative
    ("atari_montezuma_revenge", 0.0, 0.0),
])
def test_atari_by_hand(task, raw, expected):
    assert human_normalized_score(task, raw) == pytest.approx(expected)


def test_cap_applies_above_it_only():
    assert human_normalized_score("atari_breakout", 59.3, cap=100.0) == pytest.approx(100.0)
    assert human_normalized_score("atari_pong", 0.0, cap=100.0) == pytest.approx(100 * 20.7 / 35.3)


def test_the_atari_table_is_the_57_games_sfx_ships():
    assert len(ATARI_57_BASELINES) == 57
    # every game of the table is an sfx env name that resolves to an ale-py ROM: sfx ships all 57
    assert set(ATARI_57_BASELINES) == set(ATARI_57)
    for game in ATARI_57_BASELINES:
        assert check_game(f"atari_{game}") == game
    for game, (random, human) in ATARI_57_BASELINES.items():
        assert human > random, game
        assert human_normalized_score(f"atari_{game}", human) == pytest.approx(100.0)
        assert human_normalized_score(f"atari_{game}", random) == pytest.approx(0.0, abs=1e-9)
        assert atari_baselines(f"atari_{game}") == (random, human)


@pytest.mark.parametrize("level", levels.all_dmlab30_names())
def test_dmlab_delegates_to_the_dmlab_table(level):
    for raw in (-3.0, 0.0, 12.5, 500.0):
        for cap in (None, 100.0):
            mine = human_normalized_score(f"dmlab_{level}", raw, cap)
            assert mine is not None and mine == levels.human_normalized_score(level, raw, cap)


def test_dmlab_train_levels_use_their_test_baselines():
    human, random = levels.BASELINES["rooms_collect_good_objects_test"]
    assert human_normalized_score("dmlab_rooms_collect_good_objects_train", human) == pytest.approx(100.0)
    assert human_normalized_score("dmlab_rooms_watermaze", 4.065) == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("task", [
    "gym_CartPole-v1", "doom_basic", "dmlab_30", "dmlab_seekavoid_arena_01", "atari_pong_2", "atari_Pong",
    "pong", "rooms_watermaze", "atari_", "dmlab_", "", "multitask", "atari_tetris",
])
def test_names_without_baselines_give_none(task):
    assert human_normalized_score(task, 10.0) is None
    assert human_normalized_score(task, 10.0, cap=100.0) is None


def test_importing_it_loads_no_torch_nor_env_libraries():
    code = ("import sys, sfx.envs.task_scores; "
            "print(sorted(m for m in ('torch', 'deepmind_lab', 'ale_py') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


def test_suite_scores_by_hand():
    # even count: the median is the mean of the two middle values (50, 90); b is capped at 100
    scores = suite_scores({"a": 50.0, "b": 150.0, "c": 10.0, "d": 90.0})
    assert scores == pytest.approx({"hns_mean": 75.0, "hns_median": 70.0, "hns_mean_capped": 62.5, "num_tasks": 4})
    odd = suite_scores({"a": 300.0, "b": -20.0, "c": 40.0})
    assert odd == pytest.approx({"hns_mean": 320 / 3, "hns_median": 40.0, "hns_mean_capped": 40.0, "num_tasks": 3})
    assert suite_scores({"solo": 7.0}) == pytest.approx(
        {"hns_mean": 7.0, "hns_median": 7.0, "hns_mean_capped": 7.0, "num_tasks": 1})


def test_suite_scores_of_nothing_is_empty():
    assert suite_scores({}) == {}


def test_suite_scores_name_a_non_finite_task():
    with pytest.raises(ValueError, match="'atari_pong' is nan"):
        suite_scores({"atari_breakout": 10.0, "atari_pong": math.nan})


def test_suite_of_real_tasks():
    raw = {"atari_pong": 14.6, "atari_breakout": 59.3, "dmlab_rooms_watermaze": 4.065}
    hns = {t: human_normalized_score(t, r) for t, r in raw.items()}
    assert suite_scores(hns) == pytest.approx(
        {"hns_mean": 100.0, "hns_median": 100.0, "hns_mean_capped": 200 / 3, "num_tasks": 3})
