"""The ``dmlab_`` family: DeepMind Lab levels and the DMLab-30 suite.

Env names:

* ``--env=dmlab_30``: the 30 DMLab-30 levels, one level per rollout worker: worker ``i`` plays
  ``DMLAB30_LEVELS[i % 30]`` with all its envs (so use ``--num_workers`` of 30 or a multiple of it
  to cover the suite evenly). ``--dmlab30_level_assignment=env`` assigns by global env id instead
  (``env_id % 30``), which covers the suite with fewer workers when
  ``num_workers * num_envs_per_worker >= 30``.
  Each level is a task (the task protocol of :mod:`sfx.envs`): ``task_names`` are the 30 levels as
  ``dmlab_<level>`` names in ``DMLAB30_LEVELS`` order (with ``--dmlab_use_test_levels`` the two
  ``_test`` variants replace their ``_train`` levels), ``task_id`` is the env's level index.
* ``--env=dmlab_<level>``: one level, e.g. ``dmlab_rooms_collect_good_objects_train``,
  ``dmlab_explore_goal_locations_small``, ``dmlab_seekavoid_arena_01``. Unknown names are an error
  unless ``--dmlab_level_directory`` points at your own level scripts.

Observations: ``uint8 (3, 72, 96)`` RGB frames by default (``--dmlab_res_h``, ``--dmlab_res_w``).
Actions: the 9 IMPALA actions, or the 15 PopArt ones with ``--dmlab_extended_action_set``.
One step is ``--env_frameskip`` frames (default 4, as IMPALA). Instructions (language levels):
with ``--dmlab_use_instructions`` (default: on for ``dmlab_30`` and ``language_*`` levels) the
observation is a Dict of the frame (``"obs"``) and the instruction as word ids (``"instr"``,
``int32[--dmlab_instruction_max_len]``, see :mod:`sfx.envs.dmlab.instructions`), which the model
reads with an embedding + GRU beside the image encoder, as IMPALA's DMLab-30 agent does; the
string itself is in ``info['instr']``.

Episode stats (TensorBoard ``episode/...``): ``dmlab_raw_score``, ``dmlab_human_normalized_score``
(DMLab-30 levels), per level ``dmlab30/<level>/raw_score`` and ``.../hns``, and
``dmlab_target_objective``: the episode stat PBT should rank policies by: the human-normalised
score capped at 100 for ``dmlab_30``, the raw score for a single level.
Averaged over the last episodes of all workers it weights levels by how many episodes they end;
:func:`sfx.envs.dmlab.levels.dmlab30_score` gives the exact suite score from per-level means.

DeepMind Lab must be built from source (no pip package); ``deepmind_lab`` is imported only when a
``dmlab_`` env is used and its absence is a one-line error with the build steps.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
from pathlib import Path
from typing import Any

from sfx.cfg.flag_types import add_bool_arg
from sfx.errors import ConfigError
from sfx.envs.dmlab.actions import EXTENDED_ACTIONS, IMPALA_ACTIONS, action_names, action_table
from sfx.envs.dmlab.env import DmLabEnv, episode_stats, import_deepmind_lab, target_objective
from sfx.envs.dmlab.instructions import DEFAULT_MAX_LEN, DEFAULT_VOCAB_SIZE, InstructionTokenizer
from sfx.envs.dmlab.level_cache import DirectoryLevelCache
from sfx.envs.dmlab.levels import (BASELINES, CLASSIC_LEVELS, DMLAB30_LEVELS, DMLAB30_TEST_LEVEL,
                                   dmlab30_level_for, dmlab30_score, human_normalized_score, known_level_names)
from sfx.envs.multi_agent import SingleAgentEnvAdapter
from sfx.envs.registry import env_seed, register_env_family

log = logging.getLogger(__name__)

PREFIX = "dmlab_"
SUITE = "30"  # dmlab_30

# IMPALA's DMLab-30 setup: 4 frames per step, the deep ResNet encoder, a 256-wide core.
DEFAULT_OVERRIDES = {"env_frameskip": 4, "encoder_type": "resnet", "encoder_subtype": "resnet_impala",
                     "hidden_size": 256}

__all__ = [
    "BASELINES", "CLASSIC_LEVELS", "DMLAB30_LEVELS", "DMLAB30_TEST_LEVEL", "DirectoryLevelCache", "DmLabEnv",
    "DmLab30Env", "EXTENDED_ACTIONS", "IMPALA_ACTIONS", "InstructionTokenizer", "action_names", "action_table",
    "dmlab30_level_for", "dmlab30_score", "dmlab30_task_id", "dmlab30_task_names", "episode_stats",
    "human_normalized_score", "level_for_env",
    "make_dmlab_env", "register_family", "target_objective", "validate_dmlab_cfg",
]


def level_name(full_env_name: str) -> str:
    """``dmlab_rooms_watermaze`` -> ``rooms_watermaze`` (``dmlab_30`` -> ``30``)."""
    return full_env_name[len(PREFIX):]


def level_for_env(full_env_name: str, cfg: Any, env_config: dict | None) -> str:
    """The level an env plays: the named one, or for ``dmlab_30`` the worker's (or env's) DMLab-30 level."""
    name = level_name(full_env_name)
    if name != SUITE:
        return name
    return dmlab30_level_for(dmlab30_task_id(cfg, env_config), use_test_levels=cfg.dmlab_use_test_levels)


def dmlab30_task_id(cfg: Any, env_config: dict | None) -> int:
    """``dmlab_30``: the index in ``DMLAB30_LEVELS`` of the level this env plays (its task id):
    ``worker_index % 30``, or ``env_id % 30`` with ``--dmlab30_level_assignment=env``."""
    env_config = env_config or {}
    by = cfg.dmlab30_level_assignment
    index = env_config.get("env_id", 0) if by == "env" else env_config.get("worker_index", 0)
    return int(index) % len(DMLAB30_LEVELS)


def dmlab30_task_names(use_test_levels: bool = False) -> tuple[str, ...]:
    """``dmlab_30``'s tasks in task-id order: ``dmlab_<level>`` for each DMLab-30 level (the held-out
    ``_test`` variants with ``use_test_levels``)."""
    return tuple(PREFIX + dmlab30_level_for(i, use_test_levels) for i in range(len(DMLAB30_LEVELS)))


class DmLab30Env(SingleAgentEnvAdapter):
    """One env of ``dmlab_30``: a DMLab-30 level seen as one agent, with the task protocol of
    :mod:`sfx.envs`: ``task_names`` (the 30 levels, see :func:`dmlab30_task_names`) and ``task_id``
    (this env's level, fixed for its life)."""

    def __init__(self, env: DmLabEnv, task_names: tuple[str, ...], task_id: int, seed: int | None = None) -> None:
        super().__init__(env, seed=seed)
        self.task_names = task_names
        self.task_id = task_id

    def __repr__(self) -> str:
        return f"DmLab30Env(task {self.task_id} {self.task_names[self.task_id]!r}, {self.env})"


def add_dmlab_params(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("dmlab_ envs (DeepMind Lab)")
    add_bool_arg(g, "dmlab_extended_action_set", False,
                 "15 actions (PopArt: small/large look, look up/down) instead of IMPALA's 9")
    g.add_argument("--dmlab_res_w", type=int, default=96, help="frame width in pixels")
    g.add_argument("--dmlab_res_h", type=int, default=72, help="frame height in pixels")
    g.add_argument("--dmlab_renderer", choices=["software", "hardware"], default="software",
                   help="DeepMind Lab renderer: software (OSMesa, CPU) or hardware (EGL/GLX, GPU)")
    g.add_argument("--dmlab_level_cache_dir", default=None,
                   help="folder where compiled maps are cached and shared by all workers (levels that "
                        "generate a map per episode start much faster); None = no cache")
    g.add_argument("--dmlab_dataset_path", default=None,
                   help="DeepMind Lab's datasetPath: the image dataset some psychlab levels need")
    g.add_argument("--dmlab_level_directory", default=None,
                   help="DeepMind Lab's levelDirectory: a folder of your own level scripts; level names are "
                        "then not checked against the built-in list")
    g.add_argument("--dmlab30_level_assignment", choices=["worker", "env"], default="worker",
                   help="dmlab_30: level (and task id) = DMLAB30_LEVELS[worker_index %% 30] (worker) or "
                        "[env_id %% 30] (env)")
    g.add_argument("--dmlab_use_instructions", type=_auto_bool, default=None, metavar="BOOL",
                   help="observe the level's instruction as word ids beside the frame (a Dict observation); "
                        "default: on for dmlab_30 and language_* levels, off for the others")
    g.add_argument("--dmlab_instruction_vocab_size", type=int, default=DEFAULT_VOCAB_SIZE,
                   help="word ids are hashed into this many ids (0 is padding)")
    g.add_argument("--dmlab_instruction_max_len", type=int, default=DEFAULT_MAX_LEN,
                   help="words kept per instruction")
    add_bool_arg(g, "dmlab_use_test_levels", False,
                 "dmlab_30: play the held-out _test variants of the two rooms_*_train levels (evaluation)")


def _auto_bool(text: str) -> bool:
    lowered = str(text).lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean; allowed: True or False")


def uses_instructions(full_env_name: str, cfg: Any) -> bool:
    """``--dmlab_use_instructions``, or by default: dmlab_30 and the language_* levels."""
    flag = cfg.dmlab_use_instructions
    if flag is not None:
        return bool(flag)
    name = level_name(full_env_name)
    return name == SUITE or name.startswith("language_")


def check_level_name(full_env_name: str, level_directory: str | None = None) -> None:
    """:class:`ConfigError` unless ``full_env_name`` is ``dmlab_30`` or names a known level."""
    name = level_name(full_env_name)
    if name == SUITE or name in known_level_names() or level_directory:
        return
    known = (SUITE,) + known_level_names()
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f"; did you mean: {', '.join(PREFIX + c for c in close)}?" if close else ""
    raise ConfigError(f"--env={full_env_name}: unknown DeepMind Lab level {name!r}{hint} (dmlab_30, a DMLab-30 "
                      f"level such as dmlab_rooms_watermaze, or a classic one such as dmlab_seekavoid_arena_01; "
                      f"--dmlab_level_directory allows your own levels)")


def validate_dmlab_cfg(cfg: argparse.Namespace) -> None:
    """Check the level name, the dmlab flags, and that deepmind_lab can be imported."""
    check_level_name(cfg.env, cfg.dmlab_level_directory)
    for flag in ("dmlab_res_w", "dmlab_res_h"):
        value = getattr(cfg, flag)
        if not 8 <= value <= 4096:
            raise ConfigError(f"--{flag}={value} must be a frame size in pixels, between 8 and 4096")
    for flag in ("dmlab_dataset_path", "dmlab_level_directory"):
        value = getattr(cfg, flag)
        if value and not os.path.isdir(os.path.expanduser(value)):
            raise ConfigError(f"--{flag}={value} is not a folder")
    if cfg.dmlab_instruction_vocab_size < 2:
        raise ConfigError(f"--dmlab_instruction_vocab_size={cfg.dmlab_instruction_vocab_size} must be >= 2 "
                          f"(id 0 is padding)")
    if cfg.dmlab_instruction_max_len < 1:
        raise ConfigError(f"--dmlab_instruction_max_len={cfg.dmlab_instruction_max_len} must be >= 1")
    cache_dir = cfg.dmlab_level_cache_dir
    if cache_dir:
        from sfx.cfg.validation import check_writable_dir

        check_writable_dir(cache_dir, "--dmlab_level_cache_dir")
    if level_name(cfg.env) == SUITE and cfg.dmlab30_level_assignment == "worker" \
            and cfg.num_workers % len(DMLAB30_LEVELS) != 0:
        covered = min(cfg.num_workers, len(DMLAB30_LEVELS))
        log.warning("dmlab_30 with --num_workers=%d plays %d of the 30 levels%s; use a multiple of 30 workers "
                    "or --dmlab30_level_assignment=env", cfg.num_workers, covered,
                    "" if covered < 30 else " unevenly")
    import_deepmind_lab(cfg.env)


def make_dmlab_env(full_env_name: str, cfg: Any, env_config: dict | None = None,
                   render_mode: str | None = None) -> SingleAgentEnvAdapter:
    """Make the env of ``full_env_name`` for the worker/env in ``env_config``, seen as one agent."""
    check_level_name(full_env_name, cfg.dmlab_level_directory)
    level = level_for_env(full_env_name, cfg, env_config)
    cache_dir = cfg.dmlab_level_cache_dir
    env = DmLabEnv(
        level,
        extended_action_set=cfg.dmlab_extended_action_set,
        frameskip=cfg.env_frameskip,
        width=cfg.dmlab_res_w,
        height=cfg.dmlab_res_h,
        renderer=cfg.dmlab_renderer,
        level_cache=DirectoryLevelCache(Path(cache_dir)) if cache_dir else None,
        dataset_path=cfg.dmlab_dataset_path,
        level_directory=cfg.dmlab_level_directory,
        objective="hns_capped" if level_name(full_env_name) == SUITE else "raw",
        render_mode=render_mode,
        env_name=full_env_name,
        instructions=InstructionTokenizer(cfg.dmlab_instruction_vocab_size, cfg.dmlab_instruction_max_len)
        if uses_instructions(full_env_name, cfg) else None,
    )
    if level_name(full_env_name) == SUITE:
        return DmLab30Env(env, dmlab30_task_names(cfg.dmlab_use_test_levels), dmlab30_task_id(cfg, env_config),
                          seed=env_seed(cfg, env_config))
    return SingleAgentEnvAdapter(env, seed=env_seed(cfg, env_config))


def register_family() -> None:
    register_env_family(PREFIX, make_dmlab_env, add_params_fn=add_dmlab_params,
                        default_overrides=DEFAULT_OVERRIDES, validate_fn=validate_dmlab_cfg)
