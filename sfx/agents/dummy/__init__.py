"""``DUMMY_SAMPLER``: random actions through the whole sampling path, no learning
(:class:`~sfx.agents.dummy.agent.DummySampler`; its flags :mod:`~sfx.agents.dummy.flags`, its acting rule
:mod:`~sfx.agents.dummy.acting`)."""

from sfx.agents.dummy.acting import RandomActingRule, random_action_rows
from sfx.agents.dummy.agent import DummySampler

__all__ = ["DummySampler", "RandomActingRule", "random_action_rows"]
