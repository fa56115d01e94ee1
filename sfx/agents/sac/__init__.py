"""Soft Actor-Critic with central inference (SEED RL): :class:`~sfx.agents.sac.agent.SAC` (declarations), its flags
and typed config (:mod:`~sfx.agents.sac.flags`), its acting rule (:mod:`~sfx.agents.sac.acting`) and its learning
(:mod:`~sfx.agents.sac.learning`)."""

from sfx.agents.sac.acting import SquashedGaussianActing
from sfx.agents.sac.agent import SAC
from sfx.agents.sac.flags import SACConfig

__all__ = ["SAC", "SACConfig", "SquashedGaussianActing"]
