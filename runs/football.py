"""SEED RL's Google Research Football V-trace settings, with sfx's names, on academy scenarios and the full game.

    python -m sfx.runner.run --run=runs.football --runner=processes --only=academy_empty_goal_close
    python -m sfx.runner.run --run=runs.football --runner=slurm --slurm_gpus_per_job=1 --slurm_cpus_per_gpu=16

SEED's football learner flags: unroll length 100, Adam at learning rate 0.00048, entropy cost 0.00025,
baseline cost 0.5, discount 0.99, V-trace lambda 1, no reward clipping. Its env (``seed_rl/football/env.py``):
the stacked super mini map at 96x72, action repeat 1, the ``scoring`` reward unless ``scoring,checkpoints`` is
asked for, and the easy 11 vs 11 game by default; the football_ family's defaults already give that env
(docs/environments/football.md). The academy runs add the checkpoint reward, as the Football paper's academy
experiments do: gfootball's own package gives that reward (``--env_backend=python``, built by
scripts/install_football.sh); the 11 vs 11 runs use the scoring reward on the family's default backend, EnvPool.
"""

from sfx_runner import Experiment, ParamGrid, RunDescription

SEEDS = [1, 2, 3]
ACADEMY = ("academy_empty_goal_close", "academy_empty_goal", "academy_run_to_score_with_keeper",
           "academy_3_vs_1_with_keeper")

CMD = ("python -m sfx.train --algo=APPO --with_vtrace=True --vtrace_lambda=1.0 --num_workers=16 "
       "--num_envs_per_worker=8 --worker_num_splits=2 "
       # SEED RL's football learner (max_abs_reward 0: no clipping; goals are +-1, checkpoints 0.1)
       "--rollout=100 --recurrence=100 --learning_rate=0.00048 --exploration_loss_coeff=0.00025 "
       "--value_loss_coeff=0.5 --gamma=0.99 --reward_clip=1000 "
       # a batch of 8 unrolls: sfx's choice (a batch must be a whole number of unrolls)
       "--batch_size=800")

RUN_DESCRIPTION = RunDescription("football", experiments=[
    *[Experiment(name, f"{CMD} --env=football_{name} --env_backend=python --football_rewards=scoring,checkpoints "
                       f"--train_for_env_steps=20000000", ParamGrid([("seed", SEEDS)])) for name in ACADEMY],
    Experiment("11_vs_11_easy_stochastic", f"{CMD} --env=football_11_vs_11_easy_stochastic "
                                           f"--train_for_env_steps=500000000", ParamGrid([("seed", SEEDS)])),
])
