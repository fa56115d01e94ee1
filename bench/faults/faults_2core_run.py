# The 30-minute schedule's sweep on the shared 2-core machine (issue 56): bench.faults' "full" sweep with its
# 4-policy PBT self-play doom_duel replaced by a 4-policy PBT CartPole and a doom_basic run (the duel's matches did
# not start within a 60 s heartbeat under the machine's load) and budgets sized to what each reached here.
from sfx_runner import Experiment, RunDescription
COMMON = ("--device=cpu --set_workers_cpu_affinity=False --save_every_sec=5 --heartbeat_timeout_sec=10 "
          "--report_every_sec=2 --seed=1")
CARTPOLE = ("python -m sfx.train --env=gym_CartPole-v1 --num_workers=2 --num_envs_per_worker=4 --hidden_size=64 "
            "--use_rnn=False --batch_size=256 " + COMMON)
RUN_DESCRIPTION = RunDescription("faults_2core", [
    Experiment("pbt4", CARTPOLE + " --num_policies=4 --with_pbt=True --pbt_period_env_steps=20000 "
               "--pbt_start_mutation=20000 --pbt_replace_fraction=0.25 --train_for_env_steps=600000"),
    Experiment("ranks2", "python -m torch.distributed.run --standalone --nproc_per_node=2 --max_restarts=3 -m "
               + CARTPOLE.split(" -m ", 1)[1] + " --train_for_env_steps=700000 --num_workers=1 "
               "--distributed_timeout_sec=60"),
    Experiment("r2d2", "python -m sfx.train --env=gym_CartPole-v1 --algo=R2D2 --num_workers=1 --num_envs_per_worker=4 "
               "--hidden_size=64 --save_replay_buffer=True --train_for_env_steps=100000 " + COMMON),
    Experiment("sac", "python -m sfx.train --env=gym_Pendulum-v1 --algo=SAC --num_workers=1 --num_envs_per_worker=2 "
               "--hidden_size=64 --batch_size=64 --save_replay_buffer=True --replay_ratio=16 "
               "--replay_buffer_size=20000 --train_for_env_steps=6000 " + COMMON),
    Experiment("doom", "python -m sfx.train --env=doom_basic --num_workers=1 --num_envs_per_worker=2 "
               "--worker_num_splits=1 --batch_size=256 --hidden_size=64 --train_for_env_steps=120000 " + COMMON
               + " --heartbeat_timeout_sec=30"),
    Experiment("li_eval", CARTPOLE + " --inference=learner --eval_every_env_steps=50000 "
               "--train_for_env_steps=900000"),
])
