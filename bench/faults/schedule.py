"""The fault schedule: which fault, against which kind of process, when; drawn from a seed, so a schedule that
broke something can be replayed exactly (``python -m bench.faults --seed=N`` draws the same one again)."""

from __future__ import annotations

import random
from typing import NamedTuple

# what the injector can do to a running sweep
KINDS = ("sigkill", "sigstop", "disk_full", "truncate_checkpoint", "kill_doom", "machine_stop")
# the processes a signal may go to: an sfx component (by its name's prefix), a training's coordinator or
# one rank of a multi-rank training, multiprocessing's helpers of a coordinator, the sweep runner itself
ROLES = ("rollout_worker", "policy_worker", "learner", "evaluator", "coordinator", "rank", "forkserver",
         "resource_tracker", "runner")
SIGNAL_KINDS = ("sigkill", "sigstop")


class FaultInputError(ValueError):
    """Bad input to the injector (an unknown fault kind or role, a schedule that cannot be drawn): one line."""


class Fault(NamedTuple):
    """One scheduled fault. ``pick`` (in [0, 1)) chooses among the candidate targets present when it lands
    (sorted by experiment and name, so a replay picks the same one from the same processes); ``hold_sec``:
    how long a SIGSTOP or a full disk lasts."""

    at_sec: float
    kind: str
    role: str | None
    pick: float
    hold_sec: float

    def describe(self) -> str:
        return self.kind + (f" {self.role}" if self.role else "")


def check_kinds(kinds: list[str]) -> list[str]:
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise FaultInputError(f"unknown fault kind {', '.join(map(repr, unknown))}; known: {', '.join(KINDS)}")
    return kinds


def check_roles(roles: list[str]) -> list[str]:
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        raise FaultInputError(f"unknown target {', '.join(map(repr, unknown))}; known: {', '.join(ROLES)}")
    return roles


def make_schedule(seed: int, duration_sec: float, faults: int, kinds: list[str] = list(KINDS),
                  roles: list[str] = list(ROLES), warmup_sec: float = 30.0, min_gap_sec: float = 2.0) -> list[Fault]:
    """``faults`` faults at random times in ``[warmup_sec, duration_sec)``, at least ``min_gap_sec`` apart.
    Every kind in ``kinds`` comes at least once when ``faults >= len(kinds)`` (then at random); a signal
    fault's role: every role in ``roles`` once in turn, then at random; whole-machine stops are spread out
    (one per quarter of the schedule at most), since each costs every training a restart."""
    check_kinds(kinds)
    check_roles(roles)
    window = duration_sec - warmup_sec
    if faults < 1 or window < faults * min_gap_sec:
        raise FaultInputError(f"{faults} faults do not fit in {duration_sec:g} s after a {warmup_sec:g} s warmup, "
                              f"{min_gap_sec:g} s apart")
    rng = random.Random(seed)
    # times: evenly spaced slots, each jittered inside its slot (apart by construction, random within)
    slot = window / faults
    times = [warmup_sec + i * slot + rng.uniform(0, max(0.0, slot - min_gap_sec)) for i in range(faults)]
    order = list(kinds)
    rng.shuffle(order)
    drawn = order[:faults] + [rng.choice(kinds) for _ in range(faults - len(order))]
    rng.shuffle(drawn)
    # at most one machine stop per quarter: the extra ones become kills
    quarters: set[int] = set()
    for i, kind in enumerate(drawn):
        if kind == "machine_stop":
            q = int(4 * (times[i] - warmup_sec) / window)
            if q in quarters:
                drawn[i] = "sigkill" if "sigkill" in kinds else kind
            quarters.add(q)
    role_turn = [r for r in roles]
    rng.shuffle(role_turn)
    out = []
    for t, kind in zip(times, drawn):
        role = None
        if kind in SIGNAL_KINDS:
            role = role_turn.pop() if role_turn else rng.choice(roles)
        out.append(Fault(round(t, 2), kind, role, rng.random(), round(rng.uniform(2.0, 6.0), 2)))
    return out
