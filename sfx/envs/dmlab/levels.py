"""DeepMind Lab levels: the DMLab-30 suite, the classic levels, and human-normalised scores.

Sources:

* The DMLab-30 level names are the ones of DeepMind Lab's ``game_scripts/levels/contributed/dmlab30/``
  (its README lists them). Two tasks have a training and a held-out test variant
  (``rooms_collect_good_objects_{train,test}``, ``rooms_exploit_deferred_effects_{train,test}``);
  DMLab-30 training uses the ``_train`` ones and reports them under the ``_test`` baselines.
* The human and random baselines are those published with IMPALA (Espeholt et al. 2018,
  "IMPALA: Scalable Distributed Deep-RL with Importance Weighted Actor-Learner Architectures",
  appendix), as distributed in DeepMind's ``scalable_agent`` repository (``dmlab30.py``). They are
  keyed by the test-level names.

Human-normalised score of one level: ``100 * (score - random) / (human - random)``. The DMLab-30
score of an agent is the mean over the 30 levels of that number, each capped at 100 (the
"capped" variant IMPALA and PopArt report), so one level cannot make up for others.
"""

from __future__ import annotations

import math
from typing import Mapping

# The 30 levels in the order of the DMLab-30 README (index = the level of worker i % 30).
DMLAB30_LEVELS: tuple[str, ...] = (
    "rooms_collect_good_objects_train",
    "rooms_exploit_deferred_effects_train",
    "rooms_select_nonmatching_object",
    "rooms_watermaze",
    "rooms_keys_doors_puzzle",
    "language_select_described_object",
    "language_select_located_object",
    "language_execute_random_task",
    "language_answer_quantitative_question",
    "lasertag_one_opponent_small",
    "lasertag_three_opponents_small",
    "lasertag_one_opponent_large",
    "lasertag_three_opponents_large",
    "natlab_fixed_large_map",
    "natlab_varying_map_regrowth",
    "natlab_varying_map_randomized",
    "skymaze_irreversible_path_hard",
    "skymaze_irreversible_path_varied",
    "psychlab_arbitrary_visuomotor_mapping",
    "psychlab_continuous_recognition",
    "psychlab_sequential_comparison",
    "psychlab_visual_search",
    "explore_object_locations_small",
    "explore_object_locations_large",
    "explore_obstructed_goals_small",
    "explore_obstructed_goals_large",
    "explore_goal_locations_small",
    "explore_goal_locations_large",
    "explore_object_rewards_few",
    "explore_object_rewards_many",
)

# training level -> the held-out level it is evaluated (and scored) on; the others map to themselves
DMLAB30_TEST_LEVEL: dict[str, str] = {
    "rooms_collect_good_objects_train": "rooms_collect_good_objects_test",
    "rooms_exploit_deferred_effects_train": "rooms_exploit_deferred_effects_test",
}

# Levels at the top of game_scripts/levels/ (loaded by their bare name).
CLASSIC_LEVELS: tuple[str, ...] = (
    "seekavoid_arena_01",
    "stairway_to_melon",
    "nav_maze_static_01",
    "nav_maze_static_02",
    "nav_maze_static_03",
    "nav_maze_random_goal_01",
    "nav_maze_random_goal_02",
    "nav_maze_random_goal_03",
    "lt_chasm",
    "lt_hallway_slope",
    "lt_horseshoe_color",
    "lt_space_bounce_hard",
)

DMLAB30_DIR = "contributed/dmlab30"

# (human, random) episode returns per DMLab-30 test level; IMPALA paper appendix / scalable_agent.
BASELINES: dict[str, tuple[float, float]] = {
    "rooms_collect_good_objects_test": (10.0, 0.073),
    "rooms_exploit_deferred_effects_test": (85.65, 8.501),
    "rooms_select_nonmatching_object": (65.9, 0.312),
    "rooms_watermaze": (54.0, 4.065),
    "rooms_keys_doors_puzzle": (53.8, 4.135),
    "language_select_described_object": (389.5, -0.07),
    "language_select_located_object": (280.7, 1.929),
    "language_execute_random_task": (254.05, -5.913),
    "language_answer_quantitative_question": (184.5, -0.33),
    "lasertag_one_opponent_small": (12.65, -0.224),
    "lasertag_three_opponents_small": (18.55, -0.214),
    "lasertag_one_opponent_large": (18.6, -0.083),
    "lasertag_three_opponents_large": (31.5, -0.102),
    "natlab_fixed_large_map": (36.9, 2.173),
    "natlab_varying_map_regrowth": (24.45, 2.989),
    "natlab_varying_map_randomized": (42.35, 7.346),
    "skymaze_irreversible_path_hard": (100.0, 0.1),
    "skymaze_irreversible_path_varied": (100.0, 14.4),
    "psychlab_arbitrary_visuomotor_mapping": (58.75, 0.163),
    "psychlab_continuous_recognition": (58.3, 0.224),
    "psychlab_sequential_comparison": (39.5, 0.129),
    "psychlab_visual_search": (78.5, 0.085),
    "explore_object_locations_small": (74.45, 3.575),
    "explore_object_locations_large": (65.65, 4.673),
    "explore_obstructed_goals_small": (206.0, 6.76),
    "explore_obstructed_goals_large": (119.5, 2.61),
    "explore_goal_locations_small": (267.5, 7.66),
    "explore_goal_locations_large": (194.5, 3.14),
    "explore_object_rewards_few": (77.7, 2.073),
    "explore_object_rewards_many": (106.7, 2.438),
}

HNS_CAP = 100.0


def all_dmlab30_names() -> tuple[str, ...]:
    """The 30 training levels and the two held-out test variants."""
    return DMLAB30_LEVELS + tuple(DMLAB30_TEST_LEVEL.values())


def known_level_names() -> tuple[str, ...]:
    """Every level name ``dmlab_<name>`` accepts without ``--dmlab_level_directory``."""
    return all_dmlab30_names() + CLASSIC_LEVELS


def level_path(name: str) -> str:
    """The level argument of ``deepmind_lab.Lab``: DMLab-30 levels live under contributed/dmlab30/."""
    if name in DMLAB30_LEVELS or name in DMLAB30_TEST_LEVEL.values():
        return f"{DMLAB30_DIR}/{name}"
    return name


def baseline_level(name: str) -> str:
    """The level whose baselines score ``name`` (a ``_train`` level is scored as its ``_test`` level)."""
    return DMLAB30_TEST_LEVEL.get(name, name)


def human_normalized_score(level: str, score: float, cap: float | None = None) -> float | None:
    """``100 * (score - random) / (human - random)`` for a DMLab-30 level, ``None`` if it has no baselines.

    Args:
        level: level name (``_train`` variants use their ``_test`` baselines).
        score: an episode return (or a mean of returns).
        cap: if given, the result is ``min(result, cap)`` (DMLab-30 caps at 100).
    """
    entry = BASELINES.get(baseline_level(level))
    if entry is None:
        return None
    human, random = entry
    hns = 100.0 * (float(score) - random) / (human - random)
    return min(hns, cap) if cap is not None else hns


def dmlab30_score(mean_return_per_level: Mapping[str, float], cap: float | None = HNS_CAP) -> float:
    """The DMLab-30 score: mean over the 30 levels of each level's (capped) human-normalised score.

    Args:
        mean_return_per_level: level name (train or test variant) -> mean episode return on it.
            Every DMLab-30 level must be there; other levels are ignored.
        cap: per-level cap (100 by default; ``None`` for the uncapped score).

    Raises:
        ValueError: a DMLab-30 level is missing or its mean is not finite.
    """
    by_test_level = {baseline_level(k): v for k, v in mean_return_per_level.items()}
    missing = sorted(baseline_level(lv) for lv in DMLAB30_LEVELS if baseline_level(lv) not in by_test_level)
    if missing:
        raise ValueError(f"DMLab-30 score needs every level; missing: {missing}")
    scores = []
    for lv in DMLAB30_LEVELS:
        value = by_test_level[baseline_level(lv)]
        if not math.isfinite(value):
            raise ValueError(f"mean return of {lv} is {value}")
        scores.append(human_normalized_score(lv, value, cap))
    return sum(scores) / len(scores)


def dmlab30_level_for(index: int, use_test_levels: bool = False) -> str:
    """The DMLab-30 level of worker (or env) ``index``: ``DMLAB30_LEVELS[index % 30]``.

    ``use_test_levels`` swaps the two ``_train`` levels for their held-out ``_test`` variants (evaluation).
    """
    name = DMLAB30_LEVELS[int(index) % len(DMLAB30_LEVELS)]
    return DMLAB30_TEST_LEVEL.get(name, name) if use_test_levels else name
