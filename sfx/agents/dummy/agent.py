"""``DUMMY_SAMPLER``: no learning; uniformly random actions through the whole sampling path (rollout
workers, trajectory slots, queues), to measure raw sampling throughput (``python -m sfx.dummy_sampler``,
or ``python -m sfx.train --algo=DUMMY_SAMPLER``)."""

from __future__ import annotations

import argparse
from typing import Any

from sfx.agents.base import ActingRule, Agent
from sfx.agents.dummy.acting import RandomActingRule
from sfx.agents.dummy.flags import add_dummy_sampler_flags, validate_dummy_sampler_cfg

__all__ = ["DummySampler"]


class DummySampler(Agent):
    """See the module docstring: the engine's sampling path with random actions and no learner."""

    name = "DUMMY_SAMPLER"
    flag_group = "dummy sampler (python -m sfx.dummy_sampler, or --algo=DUMMY_SAMPLER)"
    entry_point = "sfx.dummy_sampler:main"

    @classmethod
    def add_flags(cls, g: argparse._ActionsContainer) -> None:
        add_dummy_sampler_flags(g)

    @classmethod
    def validate(cls, cfg: Any) -> None:
        validate_dummy_sampler_cfg(cfg)

    @classmethod
    def acting_rule(cls, cfg: Any, action_space: Any, seed: int | None = None) -> ActingRule:
        return RandomActingRule(action_space, seed)

    @classmethod
    def pbt_hyperparameters(cls, cfg: Any) -> dict[str, tuple[float, float]]:
        return {}
