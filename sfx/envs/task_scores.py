"""Human-normalised scores of tasks (env names) and the suite scores of a multi-task training.

A task is named by the env name a user types: ``atari_pong``, ``dmlab_rooms_watermaze``,
``gym_CartPole-v1``. Two families have published baselines:

* ``atari_<game>``: the Atari-57 random and human scores below.
* ``dmlab_<level>``: the DMLab-30 baselines of :mod:`sfx.envs.dmlab.levels` (``_train`` levels are
  scored with their ``_test`` baselines there).

Any other name (another family, ``dmlab_30``, a name with a suffix) has no human-normalised score:
:func:`human_normalized_score` returns None for it.

Human-normalised score (Mnih et al. 2015): ``100 * (raw - random) / (human - random)``: 0 plays like
the uniformly random policy, 100 like the professional human tester.

Pure Python: importing it loads neither torch nor ale-py nor deepmind_lab.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping

from sfx.envs.dmlab import levels as dmlab_levels

ATARI_PREFIX = "atari_"
DMLAB_PREFIX = "dmlab_"

# Scores above this count as this in the capped suite mean (DMLab-30 in IMPALA, PopArt, Brain Agent).
HNS_CAP = dmlab_levels.HNS_CAP

# Atari-57 baselines: game (ale-py ROM id, as in --env=atari_<game>) -> (random, human) episode return.
#
# The numbers are those behind the human-normalised scores of DQN (Mnih et al. 2015, "Human-level
# control through deep reinforcement learning", Nature; 49 games), completed to 57 games by the
# Dueling network paper (Wang et al. 2016, "Dueling Network Architectures for Deep Reinforcement
# Learning", appendix, no-op starts) and reused by IMPALA (Espeholt et al. 2018, appendix) and
# Agent57 (Badia et al. 2020). Both agents play with up to 30 no-op frames at the start and games
# cut at 108,000 frames. As published in DeepMind's DQN Zoo (dqn_zoo/atari_data.py).
#
# Video Pinball: the random agent's score is close to the human one (16256.9 vs 17667.9), so its
# normalised score is very sensitive; some later tables (e.g. Dopamine's) use 0 as its random score
# instead. This table keeps the published 16256.9.
ATARI_57_BASELINES: dict[str, tuple[float, float]] = {
    "alien": (227.8, 7127.7),
    "amidar": (5.8, 1719.5),
    "assault": (222.4, 742.0),
    "asterix": (210.0, 8503.3),
    "asteroids": (719.1, 47388.7),
    "atlantis": (12850.0, 29028.1),
    "bank_heist": (14.2, 753.1),
    "battle_zone": (2360.0, 37187.5),
    "beam_rider": (363.9, 16926.5),
    "berzerk": (123.7, 2630.4),
    "bowling": (23.1, 160.7),
    "boxing": (0.1, 12.1),
    "breakout": (1.7, 30.5),
    "centipede": (2090.9, 12017.0),
    "chopper_command": (811.0, 7387.8),
    "crazy_climber": (10780.5, 35829.4),
    "defender": (2874.5, 18688.9),
    "demon_attack": (152.1, 1971.0),
    "double_dunk": (-18.6, -16.4),
    "enduro": (0.0, 860.5),
    "fishing_derby": (-91.7, -38.7),
    "freeway": (0.0, 29.6),
    "frostbite": (65.2, 4334.7),
    "gopher": (257.6, 2412.5),
    "gravitar": (173.0, 3351.4),
    "hero": (1027.0, 30826.4),
    "ice_hockey": (-11.2, 0.9),
    "jamesbond": (29.0, 302.8),
    "kangaroo": (52.0, 3035.0),
    "krull": (1598.0, 2665.5),
    "kung_fu_master": (258.5, 22736.3),
    "montezuma_revenge": (0.0, 4753.3),
    "ms_pacman": (307.3, 6951.6),
    "name_this_game": (2292.3, 8049.0),
    "phoenix": (761.4, 7242.6),
    "pitfall": (-229.4, 6463.7),
    "pong": (-20.7, 14.6),
    "private_eye": (24.9, 69571.3),
    "qbert": (163.9, 13455.0),
    "riverraid": (1338.5, 17118.0),
    "road_runner": (11.5, 7845.0),
    "robotank": (2.2, 11.9),
    "seaquest": (68.4, 42054.7),
    "skiing": (-17098.1, -4336.9),
    "solaris": (1236.3, 12326.7),
    "space_invaders": (148.0, 1668.7),
    "star_gunner": (664.0, 10250.0),
    "surround": (-10.0, 6.5),
    "tennis": (-23.8, -8.3),
    "time_pilot": (3568.0, 5229.2),
    "tutankham": (11.4, 167.6),
    "up_n_down": (533.4, 11693.2),
    "venture": (0.0, 1187.5),
    "video_pinball": (16256.9, 17667.9),
    "wizard_of_wor": (563.5, 4756.5),
    "yars_revenge": (3092.9, 54576.9),
    "zaxxon": (32.5, 9173.3),
}


def atari_baselines(task_name: str) -> tuple[float, float] | None:
    """``(random, human)`` of an ``atari_<game>`` task of the Atari-57, else None."""
    if not task_name.startswith(ATARI_PREFIX):
        return None
    return ATARI_57_BASELINES.get(task_name[len(ATARI_PREFIX):])


def human_normalized_score(task_name: str, raw: float, cap: float | None = None) -> float | None:
    """``100 * (raw - random) / (human - random)`` of a task, or None where it has no baselines.

    Args:
        task_name: the env name of the task (``atari_pong``, ``dmlab_rooms_watermaze``); names
            outside the Atari-57 and DMLab-30 (other families, ``dmlab_30``, suffixed names) give None.
        raw: an episode return, or a mean of returns, in the game's own points.
        cap: if given, the result is ``min(result, cap)`` (100 for DMLab-30's capped score).
    """
    if task_name.startswith(DMLAB_PREFIX):
        return dmlab_levels.human_normalized_score(task_name[len(DMLAB_PREFIX):], raw, cap)
    entry = atari_baselines(task_name)
    if entry is None:
        return None
    random, human = entry
    hns = 100.0 * (float(raw) - random) / (human - random)
    return min(hns, cap) if cap is not None else hns


def suite_scores(hns_by_task: Mapping[str, float]) -> dict[str, float]:
    """Suite scores over the tasks that have a human-normalised score.

    Returns ``hns_mean``, ``hns_median`` (the mean of the two middle ones for an even count),
    ``hns_mean_capped`` (the mean after capping each task at :data:`HNS_CAP`, so that one task far
    above human cannot make up for others: DMLab-30's score in IMPALA, PopArt and Brain Agent) and
    ``num_tasks``. An empty mapping gives an empty dict.

    Raises:
        ValueError: a score is not finite (the message names its task).
    """
    if not hns_by_task:
        return {}
    for task, value in hns_by_task.items():
        if not math.isfinite(value):
            raise ValueError(f"human-normalised score of task {task!r} is {value}: not a finite number")
    values = [float(v) for v in hns_by_task.values()]
    return {
        "hns_mean": sum(values) / len(values),
        "hns_median": float(statistics.median(values)),
        "hns_mean_capped": sum(min(v, HNS_CAP) for v in values) / len(values),
        "num_tasks": len(values),
    }
