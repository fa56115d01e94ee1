"""Models: preprocessing, trunks (encoder + core), heads, and the actor-critic assembled from them.

``create_actor_critic(cfg, obs_space, action_space)`` builds APPO's model. Other agents assemble their
own from the same parts: ``ObsPreprocessor`` (sfx.models.preprocess), ``Trunk`` / ``make_trunk``
(sfx.models.trunk, once per trunk), ``ActionParamsHead`` and ``ValueHead`` (sfx.models.heads).
``register_encoder(name, factory)`` plugs a custom encoder in under ``cfg.encoder_type = name``;
``register_core(name, factory)`` a custom recurrent core (a ``Core``, or a ``MemoryCore`` with a
per-agent memory) under ``cfg.rnn_type = name``.
"""

from sfx.models.actor_critic import ActorCritic, create_actor_critic
from sfx.models.cores import Core, CoreStep, MemoryCore, register_core, registered_cores, unregister_core
from sfx.models.heads import ActionParamsHead, ValueHead
from sfx.models.preprocess import ObsPreprocessor
from sfx.models.registry import register_encoder, registered_encoders, unregister_encoder
from sfx.models.trunk import Trunk, make_trunk
import sfx.models.trxl  # noqa: F401 - registers --rnn_type=trxl

__all__ = ["ActionParamsHead", "ActorCritic", "Core", "CoreStep", "MemoryCore", "ObsPreprocessor", "Trunk",
           "ValueHead", "create_actor_critic", "make_trunk", "register_core", "register_encoder",
           "registered_cores", "registered_encoders", "unregister_core", "unregister_encoder"]
