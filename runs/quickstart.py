"""CartPole, 2 seeds x 2 learning rates: a whole sweep in a few minutes on 2 CPU cores.

    python -m sfx.runner.run --run=runs.quickstart --runner=processes --max_parallel=2
    python -m sfx.runner.run --run=runs.quickstart --status

Each experiment trains 300k env steps with one rollout worker: about 50-60 s with two running side
by side on 2 cores (2 minutes for the whole sweep), ending between about 150 and 500 of CartPole's
maximum reward of 500 depending on seed and learning rate. ``--set_workers_cpu_affinity=False``:
experiments running side by side would otherwise all pin their first worker to the same core.
"""

from sfx_runner import Experiment, ParamGrid, RunDescription

CMD = ("python -m sfx.train --env=gym_CartPole-v1 --train_for_env_steps=300000 --num_workers=1 "
       "--num_envs_per_worker=8 --batch_size=512 --use_rnn=False --set_workers_cpu_affinity=False")

RUN_DESCRIPTION = RunDescription("quickstart", experiments=[
    Experiment("cartpole", CMD, ParamGrid([("seed", [1, 2]), ("learning_rate", [3e-4, 1e-3])])),
])
