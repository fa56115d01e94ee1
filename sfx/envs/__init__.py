"""Envs: the family registry, the multi-agent protocol, generic wrappers; one folder per family.

The env protocol is :class:`MultiAgentEnv`'s docstring, including the optional task protocol of
multi-task training (``task_names``, ``task_id``), which ``--env=multitask`` (:mod:`sfx.envs.multitask`,
any listed envs as tasks) and ``--env=dmlab_30`` (a level per task) follow.
"""

from sfx.envs.multi_agent import MultiAgentEnv, SingleAgentEnvAdapter
from sfx.envs.registry import (EnvFamily, env_seed, find_family, make_env, register_env, register_env_family,
                               registered_prefixes, unregister_env_family)

__all__ = ["EnvFamily", "MultiAgentEnv", "SingleAgentEnvAdapter", "env_seed", "find_family", "make_env",
           "register_env", "register_env_family", "registered_prefixes", "unregister_env_family"]
