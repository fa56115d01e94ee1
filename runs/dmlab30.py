"""DMLab-30: one multi-task agent over the 30 levels (each rollout worker plays one level), 3 seeds.

    python -m sfx.runner.run --run=runs.dmlab30 --runner=slurm --slurm_gpus_per_job=1 --slurm_cpus_per_gpu=32

Needs DeepMind Lab built from source on every machine that runs it. 90 rollout workers (a multiple
of 30, so every level gets the same number of workers), the IMPALA ResNet encoder with an LSTM core,
the extended 15-action set, 10B frames per experiment. Set ``--dmlab_level_cache_dir`` in CMD to a
shared folder to start levels faster.
"""

from sfx_runner import Experiment, ParamGrid, RunDescription

SEEDS = [1, 2, 3]

CMD = ("python -m sfx.train --env=dmlab_30 --train_for_env_steps=10000000000 --num_workers=90 "
       "--num_envs_per_worker=12 --worker_num_splits=2 --rollout=32 --recurrence=32 --batch_size=2048 "
       "--use_rnn=True --rnn_type=lstm --hidden_size=256 --encoder_type=resnet --encoder_subtype=resnet_impala "
       "--nonlinearity=relu --dmlab_extended_action_set=True --dmlab_renderer=software --learning_rate=0.0002 "
       "--max_grad_norm=0.0 --save_milestones_sec=3600")

RUN_DESCRIPTION = RunDescription("dmlab30", experiments=[
    Experiment("dmlab30", CMD, ParamGrid([("seed", SEEDS)])),
])
