"""The agents' kit: what several agents need around their math, written once (DESIGN.md, "The agents' kit").

- :func:`gradient_step` (non-finite vote across ranks, clip, step) and :class:`TargetNetwork` (hard copy,
  Polyak): :mod:`sfx.agents.kit.gradients`.
- :class:`NamedOptimizers`: an agent's optimizers by checkpoint name and learning-rate flag, under schedules and
  PBT; :func:`fused_adam`, the fused kernel chosen once: :mod:`sfx.agents.kit.optimizers`.
- The replay stores: the base :class:`~sfx.agents.kit.replay_store.ReplayStore` (ring, seeded sampling, the
  update-to-data credit), APPO's mixed V-trace replay (:mod:`~sfx.agents.kit.replay_mix`), R2D2's prioritized
  sequences (:mod:`~sfx.agents.kit.sequence_replay`), SAC's transitions (:mod:`~sfx.agents.kit.transition_replay`).
- The checks replay agents share (:mod:`sfx.agents.kit.checks`): integer flags, the replay ratio,
  ``--save_replay_buffer``, seeded random streams.
"""

from sfx.agents.kit.gradients import TargetNetwork, gradient_step
from sfx.agents.kit.optimizers import NamedOptimizers, fused_adam, use_fused_adam

__all__ = ["NamedOptimizers", "TargetNetwork", "fused_adam", "gradient_step", "use_fused_adam"]
