"""Models: encoders, recurrent cores, heads and the actor-critic the engine trains.

``create_actor_critic(cfg, obs_space, action_space)`` is the one entry point the engine uses;
``register_encoder(name, factory)`` plugs a custom encoder in under ``cfg.encoder_type = name``.
"""

from sfx.models.actor_critic import ActorCritic, create_actor_critic
from sfx.models.registry import register_encoder, registered_encoders, unregister_encoder

__all__ = ["ActorCritic", "create_actor_critic", "register_encoder", "registered_encoders",
           "unregister_encoder"]
