"""The replay-store base of the agents' kit (DESIGN.md, "The agents' kit"): what R2D2's sequence replay
(:mod:`sfx.agents.kit.sequence_replay`), SAC's transition replay (:mod:`sfx.agents.kit.transition_replay`) and the V-trace
platform's buffers (:mod:`sfx.agents.kit.replay_mix`) share, written once.

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

from typing import Any, Callable, Iterator

import torch

from sfx.agents.base import Batch, tree_map
from sfx.agents.kit.checks import seeded_generator

__all__ = ["ReplayRing", "ReplayStore"]

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
