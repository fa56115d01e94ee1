"""The replay-store base of the agents' kit (DESIGN.md, "The agents' kit"): what R2D2's sequence replay
(:mod:`sfx.agents.sequence_replay`), SAC's transition replay (:mod:`sfx.agents.transition_replay`) and the V-trace
platform's buffers (:mod:`sfx.agents.replay`) share, written once.

- :class:`ReplayRing`: ``capacity`` rows (one tensor per field, ``[capacity, ...]``, in host memory), the next
  rows to write (the oldest overwritten), how many are filled.
- :class:`ReplayStore`: a ring that is a sample source around the engine's fresh one (``add`` / ``ready`` /
  ``next_batch`` / ``update_priorities``), with its own seeded random stream, the update-to-data credit and the
  minibatch iteration an agent's ``minibatches`` returns.

The update-to-data credit has one unit for every store: **trained samples** (agent steps a minibatch trains on:
a sequence's trained steps, a transition). ``--replay_ratio`` is trained samples per fresh sample (SEED RL's
meaning: the average number of times each stored step is trained on); an iteration earns ``replay_ratio x`` its
fresh samples, and each minibatch of ``m`` samples spends ``m`` of them (:meth:`ReplayStore.due`).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterator

import torch

from sfx.agents.base import Batch, tree_map
from sfx.errors import ConfigError

__all__ = ["APPO_ONLY_FLAGS", "LEARNING_STARTS_OLD_SPELLING", "ReplayRing", "ReplayStore", "add_learning_starts_flag",
           "check_replay_disk", "check_replay_memory", "check_saved_replay", "resolve_learning_starts",
           "seeded_generator"]

MEMORY_HEADROOM = 1.1

# the trainer's shared flags of APPO's model and loss that a replay agent's networks and step never read
APPO_ONLY_FLAGS = {
    **{k: "APPO's auxiliary losses" for k in ("aux_loss_reconstruction_coeff", "aux_loss_future_pred_coeff",
                                              "aux_loss_future_pred_horizon")},
    **{k: "APPO's value normalisation"
       for k in ("normalize_returns", "popart", "popart_beta", "popart_preserve_mean", "popart_clip_min")},
    **{k: "APPO's actor-critic" for k in ("actor_critic_share_weights", "adaptive_stddev", "initial_stddev")},
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
    value = getattr(cfg, old, None)
    explicit = set(explicit)
    if old in explicit and "learning_starts" in explicit:
        raise ConfigError(f"--learning_starts={cfg.learning_starts} and --{old}={value} both given: --{old} is the "
                          f"old spelling of --learning_starts; give one")
    if value is not None and "learning_starts" not in explicit:
        cfg.learning_starts = value
    if hasattr(cfg, old):
        delattr(cfg, old)
    names = getattr(cfg, "explicit_args", None)
    if names and old in names:
        cfg.explicit_args = sorted((set(names) - {old}) | {"learning_starts"})


def seeded_generator(seed: int | None) -> torch.Generator:
    """A store's own random stream: ``--seed`` (0 without one: a store's draws repeat run to run, its inputs
    already differ by the run's seed)."""
    g = torch.Generator()
    g.manual_seed(0 if seed is None else int(seed))
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


class ReplayRing:
    """``capacity`` rows, written in ring order: :meth:`claim` says where new entries go.

    Attributes:
        capacity: rows (0 until a subclass knows it, e.g. from the first batch's trajectory length).
        data: field -> ``[capacity, ...]`` (a tree: ``obs`` is a dict), allocated by the subclass on first insert.
        size: rows filled; ``next``: the row the next entry goes to.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self.data: dict[str, Any] | None = None
        self.size = 0
        self.next = 0

    def claim(self, n: int) -> tuple[int, torch.Tensor]:
        """Rows for ``n`` new entries, and the ring advanced past them -> ``(first, rows)``: entries before
        ``first`` do not fit (more than ``capacity`` at once: the last ones are kept), ``rows [n - first]``
        (int64) are where the others go, the oldest rows overwritten."""
        first = max(0, int(n) - self.capacity)
        k = int(n) - first
        rows = (self.next + torch.arange(k)) % self.capacity
        self.next = int((self.next + k) % self.capacity)
        self.size = min(self.capacity, self.size + k)
        return first, rows

    def zeros_like_rows(self, v: torch.Tensor, steps: int | None = None) -> torch.Tensor:
        """A field's storage: ``[capacity, *v.shape[1:]]`` zeros for ``v [n, ...]``, or with ``steps``
        ``[capacity, steps, *v.shape[2:]]`` for ``v [n, T, ...]`` (a row of another length than the batch's)."""
        shape = (self.capacity, *v.shape[1:]) if steps is None else (self.capacity, steps, *v.shape[2:])
        return torch.zeros(shape, dtype=v.dtype)


class ReplayStore(ReplayRing):
    """A replay ring that is an agent's sample source around the engine's fresh one.

    Subclasses write :meth:`insert` (the iteration's fresh batch into the ring; returns the batch handed on to
    the agent) and a ``sample(k) -> (minibatch, valids)``; the agent's ``minibatches`` is
    ``store.minibatches(store.due(m), m)``.

    Args:
        fresh: the engine's fresh source (``add`` / ``ready`` / ``next_batch``).
        capacity: rows of the ring (0: the subclass sets it on its first insert).
        replay_ratio: trained samples per fresh sample (the credit's unit, see the module docstring).
        device: the learner's device (minibatches land there; the ring stays in host memory).
        seed: the store's random stream (:func:`seeded_generator`).
    """

    def __init__(self, fresh: Any, capacity: int, replay_ratio: float, device: torch.device,
                 seed: int | None = None) -> None:
        super().__init__(capacity)
        self.fresh = fresh
        self.replay_ratio = float(replay_ratio)
        self.device = device
        self.generator = seeded_generator(seed)
        self.credit = 0.0  # trained samples owed to the replay ratio
        self.version = 0  # the learner's policy version at the last batch (replayed samples' ages)

    # ------------------------------------------------------------------------------------ the source

    def add(self, slots: list[int]) -> None:
        self.fresh.add(slots)

    def ready(self) -> bool:
        return self.fresh.ready()

    def next_batch(self, policy_version: int) -> Batch:
        """The fresh batch, inserted (:meth:`insert`); the agent draws its minibatches after it."""
        self.version = int(policy_version)
        return self.insert(self.fresh.next_batch(policy_version))

    def insert(self, batch: Batch) -> Batch:
        raise NotImplementedError

    def update_priorities(self, ids: torch.Tensor, priorities: torch.Tensor) -> None:
        """A store that samples by priority takes them; the others have none to change."""

    # ------------------------------------------------------------------------------------ the credit

    def earn(self, fresh_samples: float) -> None:
        """``fresh_samples`` stored: ``replay_ratio x`` them are owed to training."""
        self.credit += self.replay_ratio * float(fresh_samples)

    def forfeit(self) -> None:
        """Nothing owed (before learning starts: learning starts at the minimum fill, not with a backlog)."""
        self.credit = 0.0

    def due(self, samples_per_minibatch: int) -> int:
        """Minibatches of ``samples_per_minibatch`` the credit pays for now (spent)."""
        k = int(self.credit // samples_per_minibatch)
        self.credit -= k * samples_per_minibatch
        return k

    def refund(self, k: int, samples_per_minibatch: int) -> None:
        """``k`` minibatches of :meth:`due` back to the credit (negative: owed): ranks agree on one count per
        iteration, and each rank's credit carries its difference from it."""
        self.credit += k * samples_per_minibatch

    # ------------------------------------------------------------------------------------ checkpoints

    # the attributes besides the ring a store's state holds (counters, positions of its own side rings)
    state_fields: tuple[str, ...] = ()

    def replay_state(self) -> dict[str, Any]:
        """Everything a resumed run needs to go on with this store's data (``--save_replay_buffer``): the ring
        (every row: side rings such as SAC's final observations have their own lengths), its position, the
        credit, the random stream, :attr:`state_fields`, and :meth:`extra_state`."""
        return {"capacity": self.capacity, "size": self.size, "next": self.next, "credit": self.credit,
                # the tensors themselves, not copies: a checkpoint serialises them, and a copy would double the memory
                "data": self.data,
                "generator": self.generator.get_state(), **{k: getattr(self, k) for k in self.state_fields},
                **self.extra_state()}

    def load_replay_state(self, state: dict[str, Any], capacity: int) -> None:
        """The inverse of :meth:`replay_state`; ``capacity``: this run's rows, which must be the saved ones
        (:func:`check_saved_replay` said so at start). A checkpoint loaded onto a GPU brings its tensors back to
        host memory, where the ring lives."""
        if state["data"] is None:
            return  # saved before anything was stored: nothing to go on with
        if int(state["capacity"]) != capacity:
            raise ValueError(f"a saved replay of {state['capacity']} rows into a store of {capacity}")
        self.capacity, self.size, self.next = capacity, int(state["size"]), int(state["next"])
        self.credit = float(state["credit"])
        self.data = tree_map(lambda v: v.cpu(), state["data"])
        self.generator.set_state(state["generator"].cpu())
        for k in self.state_fields:
            setattr(self, k, state[k])
        self.load_extra_state(state)

    def extra_state(self) -> dict[str, Any]:
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        pass

    # ------------------------------------------------------------------------------------ minibatches

    def sample(self, k: int) -> tuple[dict[str, Any], torch.Tensor]:
        raise NotImplementedError

    def minibatches(self, count: int, size: int | Callable[[], int]) -> Iterator[tuple[dict[str, Any], torch.Tensor]]:
        """``count`` minibatches of ``size`` samples, drawn one at a time as the learner asks (it looks one ahead
        to know the last: a minibatch sees the priorities given back by every step but the one just before it,
        as SEED RL's prefetched sampling does); ``size`` may be a callable asked anew (PBT may change it)."""
        for _ in range(count):
            yield self.sample(size() if callable(size) else size)
