"""Models: encoders, recurrent cores, heads and the actor-critic the engine trains.

``create_actor_critic(cfg, obs_space, action_space)`` is the one entry point the engine uses;
``register_encoder(name, factory)`` plugs a custom encoder in under ``cfg.encoder_type = name``;
``register_core(name, factory)`` a custom recurrent core (a ``Core``, or a
``MemoryCore`` with a per-agent memory) under ``cfg.rnn_type = name``.
"""

from sfx.models.actor_critic import ActorCritic, create_actor_critic
from sfx.models.cores import Core, MemoryCore, register_core, registered_cores, unregister_core
from sfx.models.registry import register_encoder, registered_encoders, unregister_encoder

__all__ = ["ActorCritic", "Core", "MemoryCore", "create_actor_critic", "register_core", "register_encoder", "registered_cores",
           "registered_encoders", "unregister_core", "unregister_encoder"]
