"""Runnable examples of extending sfx: each is ``python -m sfx_examples.<name> [extra sfx.train flags]``.

- ``train_custom_env_custom_model``: your own gymnasium env (image observations) and your own encoder.
- ``train_gym_env``: any registered gymnasium env through the ``gym_`` family.
- ``train_custom_multi_agent_env``: your own multi-agent env (several agents, one policy).

Each registers what it adds at the top level of its module: the worker processes import the main
module again, and need the same env and encoder registrations as the process that parsed the flags.
"""
