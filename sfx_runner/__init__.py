"""sfx_runner: sweeps of seeds and hyperparameter grids on local processes, Slurm or NGC.

A run description is a Python module exposing ``RUN_DESCRIPTION``::

    from sfx_runner import Experiment, ParamGrid, RunDescription

    RUN_DESCRIPTION = RunDescription("cartpole_lr", experiments=[
        Experiment("cartpole", "python -m sfx.train --env=gym_CartPole-v1 --train_for_env_steps=300000",
                   ParamGrid([("seed", [1, 2]), ("learning_rate", [3e-4, 1e-3])])),
    ])

and ``python -m sfx.runner.run --run=<module> --runner=processes`` launches it. This package only
builds and launches command lines: it never imports torch or the trainer, so it runs on a login node.
"""

from sfx_runner.errors import RunnerError
from sfx_runner.params import ParamGrid, ParamList
from sfx_runner.run_description import Experiment, ExperimentSpec, RunDescription, resolve_interpreter

__all__ = ["Experiment", "ExperimentSpec", "ParamGrid", "ParamList", "RunDescription", "RunnerError",
           "resolve_interpreter"]
