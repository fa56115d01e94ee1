"""Self-play PBT on doom_duel that fits 2 CPU cores: 4 policies, 2 workers x 2 matches, 64x48.

    python -m sfx.runner.run --run=runs.pbt_doom_duel_small            # about an hour per 2M frames here

Short matches (0.5 game minute) so that episodes, and with them PBT decisions, come often; a PBT
step every 100k frames of a policy from 200k on. Watch it with ``python -m sfx.tb '*pbt_doom_duel_small*'``:
``episode/frags`` per policy, ``pbt/*`` hyperparameters, ``pbt/decisions`` texts.
"""

from sfx_runner import Experiment, ParamGrid, RunDescription

CMD = ("python -m sfx.train --env=doom_duel --train_for_env_steps=2000000 --num_workers=2 "
       "--num_envs_per_worker=2 --worker_num_splits=2 --res_w=64 --res_h=48 --rollout=32 --recurrence=32 "
       "--batch_size=512 --use_rnn=True --hidden_size=256 --num_policies=4 --with_pbt=True "
       "--pbt_period_env_steps=100000 --pbt_start_mutation=200000 --pbt_replace_fraction=0.25 "
       "--doom_reward_shaping=kill=1,death=-0.5,damage=0.01 --doom_timelimit_min=0.5 "
       "--learning_rate=0.0003 --set_workers_cpu_affinity=False")

RUN_DESCRIPTION = RunDescription("pbt_doom_duel_small", experiments=[
    Experiment("duel_small", CMD, ParamGrid([("seed", [1])])),
])
