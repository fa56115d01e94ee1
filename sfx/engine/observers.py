"""Observers: features that watch a training from the coordinator loop and steer it through control
messages (population-based training is one: ``sfx.pbt`` registers it). The engine never imports
them; a package registers its observer when it is imported (``python -m sfx.train`` imports the
built-in ones).

A registration is a name, a factory ``factory(cfg, ctx) -> Observer | None`` (None: not wanted
with this cfg) and optionally ``largest_batch_size(cfg) -> int``, for an observer that may give a
policy a larger batch than ``--batch_size`` during the run (trajectory slots are allocated for it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from sfx.errors import ConfigError


@dataclass(frozen=True)
class ObserverContext:
    """What an observer may use: the env's description and the control queues of the components."""

    env_info: Any
    learner_control: tuple         # per policy: PBT_SNAPSHOT / PBT_UPDATE to its learner
    rollout_control: tuple         # per rollout worker: SHAPING
    summary: Callable[[int, str, Any, int], None]  # (policy, tag, scalar or text, env steps) -> TensorBoard
    rng: Any = None                # a random.Random seeded from --seed (None: unseeded)


class Observer:
    """Called by the coordinator loop; every method may be left as it is."""

    def handle(self, reports: list) -> None:
        """Every report the components sent this turn (:mod:`sfx.engine.protocol`)."""

    def update(self, policy_stats: list, env_steps: list[int]) -> None:
        """Once per loop turn, from the moment every learner is ready (resumed or started)."""

    def write_summaries(self, policy: int, env_steps: int) -> None:
        """With every TensorBoard flush of a policy's summaries."""


@dataclass(frozen=True)
class _Registration:
    factory: Callable[[Any, ObserverContext], Observer | None]
    largest_batch_size: Callable[[Any], int] | None


_OBSERVERS: dict[str, _Registration] = {}

# cfg flags that need an observer, and the package that registers it
_NEEDED_BY_FLAG = {"with_pbt": ("pbt", "sfx.pbt")}


def register_observer(name: str, factory: Callable[[Any, ObserverContext], Observer | None],
                      largest_batch_size: Callable[[Any], int] | None = None) -> None:
    _OBSERVERS[name] = _Registration(factory, largest_batch_size)


def check_observers_available(cfg: Any) -> None:
    """A flag whose observer was never registered would silently do nothing: say so instead."""
    for flag, (name, package) in _NEEDED_BY_FLAG.items():
        if getattr(cfg, flag) and name not in _OBSERVERS:
            raise ConfigError(f"--{flag}=True needs the {name!r} observer, which `import {package}` registers "
                              f"(python -m sfx.train does); it is not loaded in this process")


def largest_batch_size(cfg: Any) -> int:
    """The largest batch any policy may get during the run."""
    sizes = [r.largest_batch_size(cfg) for r in _OBSERVERS.values() if r.largest_batch_size is not None]
    return max([cfg.batch_size, *sizes])


def create_observers(cfg: Any, ctx: ObserverContext) -> list[Observer]:
    check_observers_available(cfg)
    out = []
    for registration in _OBSERVERS.values():
        observer = registration.factory(cfg, ctx)
        if observer is not None:
            out.append(observer)
    return out
