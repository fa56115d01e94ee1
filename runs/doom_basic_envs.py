"""The single-player VizDoom scenarios bundled with vizdoom, 3 seeds each (27 experiments).

    python -m sfx.runner.run --run=runs.doom_basic_envs --runner=processes --max_parallel=4
    python -m sfx.runner.run --run=runs.doom_basic_envs --only=basic,defend_the_center --dry_run

Sized for a workstation (16 rollout workers per experiment, a GPU helps the learner). Each scenario
gets its ``--reward_scale`` from ``sfx.envs.doom.scenarios`` (the env's default, written out here so
the command lines say it; rewards of 100 and more would otherwise be clipped) and a budget in env frames (frameskip 4) by which the usual agents
have converged; experiment names start with the scenario, so ``--only=<scenario>`` picks one.
"""

from sfx_runner import Experiment, ParamGrid, RunDescription

SEEDS = [1, 2, 3]

# scenario -> (--reward_scale, --train_for_env_steps)
SCENARIOS = {
    "basic": (0.01, 5_000_000),
    "defend_the_center": (1.0, 50_000_000),
    "defend_the_line": (1.0, 50_000_000),
    "health_gathering": (0.01, 50_000_000),
    "health_gathering_supreme": (0.01, 100_000_000),
    "my_way_home": (1.0, 50_000_000),
    "deadly_corridor": (0.01, 100_000_000),
    "take_cover": (0.01, 50_000_000),
    "predict_position": (1.0, 50_000_000),
}

CMD = ("python -m sfx.train --num_workers=16 --num_envs_per_worker=8 --worker_num_splits=2 --rollout=32 "
       "--recurrence=32 --batch_size=2048 --use_rnn=True --learning_rate=0.0001")

RUN_DESCRIPTION = RunDescription("doom_basic_envs", experiments=[
    Experiment(name, f"{CMD} --env=doom_{name} --reward_scale={scale} --train_for_env_steps={steps}",
               ParamGrid([("seed", SEEDS)]))
    for name, (scale, steps) in SCENARIOS.items()
])
