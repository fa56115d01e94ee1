"""R2D2 with central inference (SEED RL): :class:`~sfx.agents.r2d2.agent.R2D2` (declarations), its flags and typed
config (:mod:`~sfx.agents.r2d2.flags`), its acting rule (:mod:`~sfx.agents.r2d2.acting`) and its learning
(:mod:`~sfx.agents.r2d2.learning`)."""

from sfx.agents.r2d2.acting import EpsilonGreedy
from sfx.agents.r2d2.agent import R2D2
from sfx.agents.r2d2.flags import R2D2Config

__all__ = ["R2D2", "EpsilonGreedy", "R2D2Config"]
