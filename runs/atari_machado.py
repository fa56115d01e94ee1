"""Machado et al.'s Atari protocol (sticky actions, full action set, no episodic life): Pong, Breakout, BeamRider
x 3 seeds, 200M frames each (9 experiments), on the EnvPool backend with the settings Cleanba's IMPALA ran.

    python -m sfx.runner.run --run=runs.atari_machado --backend=processes --max_parallel=1
    python -m sfx.runner.run --run=runs.atari_machado --only='breakout*' --backend=processes
    python -m sfx.runner.run --run=runs.atari_machado --runner=slurm --slurm_gpus_per_job=1 --slurm_cpus_per_gpu=16
    python -m sfx.runner.run --run=runs.atari_machado --dry_run       # the 9 command lines

Units: frames (sfx counts env steps in emulator frames): 200M frames = 50M agent steps at frameskip 4.

The protocol (Machado, Bellemare, Talvitie, Veness, Hausknecht, Bowling 2018, "Revisiting the Arcade Learning
Environment: Evaluation Protocols and Open Problems for General Agents", JAIR), as Cleanba's ``cleanba_impala.py``
configures EnvPool for it, and the sfx flag of each setting:

- sticky actions, each frame repeats the previous action with probability 0.25: ``--atari_sticky_actions=True
  --atari_sticky_action_prob=0.25`` (sfx's atari default)
- the full action set, 18 actions in every game: ``--atari_full_action_set=True`` (sfx's atari default is the
  minimal set: set here)
- no end of episode at a lost life, the game over ends it: ``--atari_episodic_life=False`` (sfx's atari default is
  episodic life while training: set here)
- no no-op starts (the sticky actions are the randomness): ``--atari_noop_max=1``, one no-op frame, the fewest
  EnvPool serves and what Cleanba's ``noop_max=1`` runs
- FIRE at a game's start, for one frame: ``--atari_fire_reset=True`` on EnvPool (EnvPool's ``use_fire_reset``,
  left at its default by Cleanba)
- 4 frames per agent step, max over the last two: ``--env_frameskip=4`` (the IMPALA anchors' frameskip)
- 108,000 frames per game at most (Cleanba: ``max_episode_steps=27000`` agent steps): ``--atari_max_episode_frames=108000``
- rewards clipped to [-1, 1] for learning, scores raw: ``--reward_clip=1.0`` (Cleanba: EnvPool's ``reward_clip``)
- 84x84 grayscale, 4 frames stacked: no flag, always (EnvPool's defaults, which Cleanba keeps)
- 200M frames: ``--train_for_env_steps=200000000``

sfx's atari defaults checked against this list: sticky actions 0.25 are the default; the full action set and the
absence of episodic life are not (``--atari_full_action_set`` defaults to False, ``--atari_episodic_life`` to True),
so both are set here, like every protocol flag, so that a change of the family's defaults cannot change the protocol.

Backend: ``--env_backend=envpool``, which serves this protocol exactly as Cleanba's runs configured EnvPool (only
the random streams differ); the Python envs would press FIRE for one agent step (4 frames) instead of one frame.

Learning hyperparameters: the atari family's defaults (sfx's APPO, no learning flag below), as in
runs/atari_cleanrl.py; the comparison with the IMPALA anchors is at equal frames.

Evaluation: every 5M frames the evaluator plays 8 whole games with the newest weights; training already plays whole
games (no episodic life), so the evaluator's envs need no flags of their own. The evaluator makes the family's
Python env (EnvPool has nothing to batch in one env: docs/environments/envpool.md), whose only difference here is
the FIRE at a game's start, held for one agent step instead of one frame.

Published anchors (final score at 200M frames, the same protocol: Cleanba / moolib / monobeast IMPALA): Pong
18.9-19.8, Breakout 442-482, BeamRider 7,760-11,583; Cleanba ran at ~25K frames/s on 1 A100 + 10 CPUs. sfx's
results on this protocol: not yet run.

Machine: 16 rollout workers x 8 envs (a GPU node with 16 or more cores). Names start with the game.
"""

from sfx_runner import Experiment, ParamGrid, RunDescription

SEEDS = [1, 2, 3]
GAMES = ("pong", "breakout", "beam_rider")
FRAMES = 200_000_000  # 50M agent steps x frameskip 4
EVAL_EVERY_FRAMES = 5_000_000

PROTOCOL = ("--env_backend=envpool --env_frameskip=4 --atari_sticky_actions=True --atari_sticky_action_prob=0.25 "
            "--atari_full_action_set=True --atari_episodic_life=False --atari_noop_max=1 --atari_fire_reset=True "
            "--atari_max_episode_frames=108000 --reward_clip=1.0")

CMD = (f"python -m sfx.train --train_for_env_steps={FRAMES} --num_workers=16 --num_envs_per_worker=8 "
       f"--worker_num_splits=2 {PROTOCOL} "
       f"--eval_every_env_steps={EVAL_EVERY_FRAMES} --eval_episodes=8 --eval_num_envs=4")

RUN_DESCRIPTION = RunDescription("atari_machado", experiments=[
    Experiment(game, f"{CMD} --env=atari_{game}", ParamGrid([("seed", SEEDS)])) for game in GAMES
])
