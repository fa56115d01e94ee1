"""Agents: one folder per learning algorithm (``appo/``, ``r2d2/``, ``sac/``, ``dummy/``: ``flags.py``,
``acting.py``, ``learning.py``, ``agent.py``), each an :class:`Agent` registered under its ``--algo`` name, and
``kit/`` beside them (replay stores, named optimizers, the gradient step, shared checks). A template of your own:
``sfx_examples/train_custom_agent.py``.

An agent declares its model, its acting rule and the per-step fields the trajectory slots store for it,
how many fresh trajectories make an iteration, its training step, what a checkpoint holds beside the
weights, its flags and their validation, and the hyperparameters PBT may mutate. The engine's learner is
the shell around it (messages, checkpoints, PBT, ranks, weight publishing). Built from :mod:`sfx.algo`
math and :mod:`sfx.models` parts; no processes, no queues.
"""

from sfx.agents.base import (Acted, ActingRule, Agent, Batch, FieldSpec, NonFiniteBatch, Stepped, trajectories_per_batch,
                             tree_map)
from sfx.agents.registry import (DEFAULT_AGENT, ensure_registered, find_agent, register_agent, registered_agents,
                                 unregister_agent)

__all__ = ["Acted", "ActingRule", "Agent", "Batch", "DEFAULT_AGENT", "FieldSpec", "NonFiniteBatch", "Stepped", "ensure_registered",
           "find_agent", "register_agent", "registered_agents", "trajectories_per_batch", "tree_map", "unregister_agent"]
