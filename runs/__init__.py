"""Run descriptions: Python modules exposing ``RUN_DESCRIPTION`` (a ``sfx_runner.RunDescription``).

Launch one with ``python -m sfx.runner.run --run=runs.<name> --runner=processes|slurm|ngc``; add
``--dry_run`` to see the command lines, ``--status`` to see how far each experiment got.

- ``quickstart``: CartPole, 2 seeds x 2 learning rates; minutes on 2 CPU cores
- ``doom_basic_envs``: the single-player VizDoom scenarios x 3 seeds
- ``atari``: the 57 Atari games x 3 seeds
- ``dmlab30``: DMLab-30 (one multi-task agent) x 3 seeds
- ``pbt_doom_duel``: self-play PBT on doom_duel
- ``benchmark``: throughput of a few envs for several envs-per-worker counts

Run modules only build command lines: they import nothing but ``sfx_runner`` (no torch), so they load
on a cluster's login node.
"""
