"""Throughput: a few envs, each with 8, 16 and 32 envs per rollout worker, 120 s of training each.

    python -m sfx.runner.run --run=runs.benchmark --runner=processes --max_parallel=1
    python -m sfx.runner.run --run=runs.benchmark --status        # the fps column is the result

Run one experiment at a time (``--max_parallel=1``, the default): experiments running side by side
would measure each other. ``--num_workers`` is left at its default, every CPU core of the machine.
``doom_benchmark`` is VizDoom's fixed-cost scenario (every step costs about the same whatever the
policy does), CartPole measures the engine itself, Breakout an Atari game.
"""

from sfx_runner import Experiment, ParamGrid, RunDescription

ENVS = {"cartpole": "gym_CartPole-v1", "doom": "doom_benchmark", "breakout": "atari_breakout"}

CMD = "python -m sfx.train --train_for_seconds=120 --worker_num_splits=2 --save_every_sec=600"

RUN_DESCRIPTION = RunDescription("benchmark", experiments=[
    Experiment(name, f"{CMD} --env={env}", ParamGrid([("num_envs_per_worker", [8, 16, 32])]))
    for name, env in ENVS.items()
])
