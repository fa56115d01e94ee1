"""The checks and flag declarations the replay agents (R2D2, SAC) share, written once: their integer flags and
replay ratio, ``--learning_starts`` and its old spelling, ``--save_replay_buffer``, the memory and disk a replay
needs, a saved replay's size, and the seeded random streams of stores and acting rules.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch

from sfx.cfg.flag_types import add_bool_arg
from sfx.errors import ConfigError

__all__ = ["LEARNING_STARTS_OLD_SPELLING", "REPLAY_AGENTS_IGNORE", "acting_generator", "add_learning_starts_flag",
           "add_save_replay_buffer_flag", "check_integer_flags", "check_replay_disk", "check_replay_memory",
           "check_replay_ratio", "check_saved_replay", "resolve_learning_starts", "seeded_generator"]

MEMORY_HEADROOM = 1.1

# the trainer's shared flags that a replay agent's networks and step never read
REPLAY_AGENTS_IGNORE = {
    "max_policy_lag": "replayed samples are trained at any age (--replay_ratio sets how often)",
    **{k: "a Transformer-XL core (refused: a replay agent keeps no memory of past steps)"
       for k in ("mem_len", "n_layer", "n_heads", "d_head", "d_inner", "trxl_dropout", "trxl_gate")},
}


# R2D2's name of --learning_starts before every replay agent shared one (SEED RL's name, which counts unrolls
# where sfx counted samples already; published command lines and saved cfg.json files carry it)
LEARNING_STARTS_OLD_SPELLING = "replay_buffer_min_size"


def add_learning_starts_flag(g: Any, default: int, what: str) -> None:
    """``--learning_starts`` (SB3 / RL Zoo's name; unit: samples, i.e. agent steps stored in the replay) with
    ``default``, ``what`` saying what it waits for in the agent's terms; and its old spelling
    ``--replay_buffer_min_size``, which sets it (:func:`resolve_learning_starts`, from the agent's
    ``check_flags``)."""
    g.add_argument("--learning_starts", type=int, default=default,
                   help=f"unit: samples (agent steps) stored in the replay before training starts: {what} "
                        f"(SB3 / RL Zoo's learning_starts); >= 0")
    # no value of its own (None: not given); a saved cfg.json of the old name sets it on resume
    g.add_argument(f"--{LEARNING_STARTS_OLD_SPELLING}", type=int, default=None, metavar="LEARNING_STARTS",
                   help="the old spelling of --learning_starts (R2D2's, after SEED RL's flag, before every replay "
                        "agent shared one name), kept so that published command lines run: sets --learning_starts "
                        "(unit: samples, as before); giving both is refused")


def resolve_learning_starts(cfg: Any, explicit: Any) -> None:
    """The old spelling's value moved to ``cfg.learning_starts`` (in place; the old field removed, so cfg.json
    carries one name). ``explicit``: the flags given on the command line. A given ``--learning_starts`` beats
    an old spelling that was not given (a saved cfg.json's, an env family's default).

    Raises:
        ConfigError: both spellings were given.
    """
    old = LEARNING_STARTS_OLD_SPELLING
    value = vars(cfg).pop(old, None)  # gone from cfg once resolved (and from cfg.json with it)
    explicit = set(explicit)
    if old in explicit and "learning_starts" in explicit:
        raise ConfigError(f"--learning_starts={cfg.learning_starts} and --{old}={value} both given: --{old} is the "
                          f"old spelling of --learning_starts; give one")
    if value is not None and "learning_starts" not in explicit:
        cfg.learning_starts = value
    if old in cfg.explicit_args:
        cfg.explicit_args = sorted((set(cfg.explicit_args) - {old}) | {"learning_starts"})


def add_save_replay_buffer_flag(g: Any) -> None:
    """``--save_replay_buffer`` (SB3's name), the same for every replay agent."""
    add_bool_arg(g, "save_replay_buffer", False,
                 "keep the replay buffer in every checkpoint (SB3's save_replay_buffer), so that a resumed run goes on "
                 "with its data instead of refilling it; the disk it needs is checked at start, a saved replay of "
                 "another size is refused. One rank only (with several, each rank's replay stays its own)")


def check_integer_flags(cfg: Any, lowest: Mapping[str, int]) -> None:
    """:class:`ConfigError` unless each flag ``name`` of ``lowest`` is an integer (not a bool) >= its value."""
    for name, low in lowest.items():
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < low:
            raise ConfigError(f"--{name}={value} must be an integer >= {low}")


def check_replay_ratio(cfg: Any) -> None:
    """:class:`ConfigError` unless ``--replay_ratio`` (trained samples per fresh sample) is finite and > 0."""
    if not (cfg.replay_ratio > 0 and math.isfinite(cfg.replay_ratio)):
        raise ConfigError(f"--replay_ratio={cfg.replay_ratio} must be a finite number > 0 (trained samples per "
                          f"fresh sample)")


def seeded_generator(seed: int | None) -> torch.Generator:
    """A store's own random stream: ``--seed`` (0 without one: a store's draws repeat run to run, its inputs
    already differ by the run's seed)."""
    g = torch.Generator()
    g.manual_seed(0 if seed is None else int(seed))
    return g


def acting_generator(seed: int | None) -> torch.Generator:
    """An acting rule's own random stream: ``--seed``, or a fresh random one without it (acting, unlike a store,
    differs run to run when no seed is asked for)."""
    g = torch.Generator()
    if seed is None:
        g.seed()
    else:
        g.manual_seed(int(seed))
    return g


def check_saved_replay(checkpoint: Any, rows: int, unit: str, where: str) -> None:
    """:class:`ConfigError` when ``checkpoint`` holds a replay (``--save_replay_buffer``) of another number of
    rows than this run's flags make (``rows`` of ``unit``): a resumed run must continue with its data as saved."""
    saved = checkpoint.get("replay")
    if saved is not None and int(saved["capacity"]) not in (0, rows):
        raise ConfigError(f"the checkpoint in {where} holds a replay of {saved['capacity']:,} {unit}, the current "
                          f"flags make {rows:,}: keep --replay_buffer_size and --rollout as they were, or resume "
                          f"with --save_replay_buffer=False (the replay refills)")


def check_replay_disk(bytes_per_policy: int, cfg: Any) -> None:
    """:class:`ConfigError` when ``--save_replay_buffer`` checkpoints (``--keep_checkpoints`` of them, and one
    being written) cannot fit on ``--train_dir``'s disk: said at start, not when the first save fails."""
    import shutil
    from pathlib import Path

    path = Path(cfg.train_dir).expanduser()
    while not path.exists():
        path = path.parent
    needed = bytes_per_policy * cfg.num_policies * (cfg.keep_checkpoints + 1)
    free = shutil.disk_usage(path).free
    if needed > free:
        mib = 1024 * 1024
        raise ConfigError(f"--save_replay_buffer=True keeps the replay in every checkpoint: {math.ceil(needed / mib):,} "
                          f"MiB for --keep_checkpoints={cfg.keep_checkpoints} (and one being written) but "
                          f"{cfg.train_dir} has {free // mib:,} MiB free; lower --replay_buffer_size or "
                          f"--keep_checkpoints, or --save_replay_buffer=False")


def check_replay_memory(bytes_per_policy: int, num_policies: int, flags: str) -> None:
    """:class:`ConfigError` when the machine's available memory cannot hold every policy's replay (with 10% to
    spare); ``flags``: the agent's own flags that size it (``--replay_buffer_size=...``), named in the message
    (an agent checks its own in ``host_memory_bytes``, so the engine's generic check never names another
    agent's flags)."""
    import psutil

    available = psutil.virtual_memory().available
    if bytes_per_policy * num_policies * MEMORY_HEADROOM > available:
        mib = 1024 * 1024
        raise ConfigError(f"{flags} need {math.ceil(bytes_per_policy / mib):,} MiB of memory per policy "
                          f"(--num_policies={num_policies}) but the machine has {available // mib:,} MiB available; "
                          f"lower {flags.split('=')[0]} (or --num_policies, the observation size)")
