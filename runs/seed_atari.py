"""SEED RL's R2D2 Atari run, with sfx's names: the settings of SEED RL's Atari training script, not the R2D2
learner's flag defaults (which are small, for a quick start: 1,000 sequences, minimum fill 10, replay ratio 1.5,
clip 40, target copy every 400 steps).

    python -m sfx.runner.run --run=runs.seed_atari --runner=slurm --slurm_gpus_per_job=1 --slurm_cpus_per_gpu=16
    python -m sfx.runner.run --run=runs.seed_atari --only=breakout --runner=processes

SEED's Atari script: 100,000 sequences in replay, learning from 5,000, replay ratio 0.75, unroll length 80,
burn-in 40, learning rate 1e-4, gradient clip 80; the R2D2 paper copies the target network every 2,500
learner steps. SEED's network is an LSTM fed the previous action and reward with 512-wide streams; its Atari
has no sticky actions, the full action set and no episode end on a lost life: the env flags below say the
same. The memory check at start refuses the run on a machine without room for the replay
(100,000 sequences of 40 + 80 steps of 84x84x4 frames).
"""

from sfx_runner import Experiment, ParamGrid, RunDescription

SEEDS = [1, 2, 3]
GAMES = ("breakout", "pong", "seaquest", "space_invaders", "ms_pacman", "qbert")

CMD = ("python -m sfx.train --algo=R2D2 --train_for_env_steps=200000000 --num_workers=16 --num_envs_per_worker=16 "
       "--worker_num_splits=2 "
       # SEED RL's Atari training script
       # (the replay flags count samples: 100,000 and 5,000 sequences of 80 steps)
       "--replay_buffer_size=8000000 --learning_starts=400000 --replay_ratio=0.75 --rollout=80 --recurrence=80 "
       "--burn_in=40 --learning_rate=0.0001 --max_grad_norm=80 "
       # the R2D2 paper's target period; SEED's network inputs and width
       "--target_update_period=2500 --use_prev_action_reward=True --hidden_size=512 "
       # SEED's Atari: deterministic games, the full action set, no episode end on a lost life
       "--atari_sticky_actions=False --atari_full_action_set=True --atari_episodic_life=False")

RUN_DESCRIPTION = RunDescription("seed_atari", experiments=[
    Experiment(game, f"{CMD} --env=atari_{game}", ParamGrid([("seed", SEEDS)])) for game in GAMES
])
