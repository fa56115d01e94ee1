"""CleanRL's Atari protocol (``ppo_atari.py``): Pong, Breakout, BeamRider x 3 seeds, 40M frames each (9 experiments).

    python -m sfx.runner.run --run=runs.atari_cleanrl --backend=processes --max_parallel=1
    python -m sfx.runner.run --run=runs.atari_cleanrl --only='pong*' --backend=processes
    python -m sfx.runner.run --run=runs.atari_cleanrl --runner=slurm --slurm_gpus_per_job=1 --slurm_cpus_per_gpu=16
    python -m sfx.runner.run --run=runs.atari_cleanrl --dry_run       # the 9 command lines

Units: frames. sfx counts env steps in emulator frames (``--train_for_env_steps``, ``--eval_every_env_steps``,
the ``reward`` curves' x axis); CleanRL's ``total_timesteps=10000000`` counts agent steps, which at frameskip 4 are
40M frames.

The protocol, setting by setting (CleanRL's ``cleanrl/ppo_atari.py`` and its docs page ``rl-algorithms/ppo``:
``gym.make("<Game>NoFrameskip-v4")`` wrapped in NoopResetEnv(30), MaxAndSkipEnv(4), EpisodicLifeEnv, FireResetEnv,
ClipRewardEnv, ResizeObservation(84), GrayScaleObservation, FrameStack(4)), and the sfx flag that says the same:

- no sticky actions (the v4 games' ``repeat_action_probability=0``): ``--atari_sticky_actions=False``
- the game's minimal action set (v4): ``--atari_full_action_set=False``
- a lost life ends the episode while training: ``--atari_episodic_life=True``
- reward clipping, ``sign(r)``: ``--reward_clip=1.0`` (the learner clamps to [-1, 1], which is ``sign`` on Atari's
  integer rewards; statistics keep the raw score)
- 1..30 no-op frames at a game's start: ``--atari_noop_max=30``
- 4 frames per agent step, max over the last two: ``--env_frameskip=4`` (the max-pool has no flag: always on)
- FIRE at a game's start in games that have it: ``--atari_fire_reset=True``
- 84x84 grayscale, 4 frames stacked: no flag, the family always does it (``sfx.envs.atari``, OBS_SIZE and
  NUM_STACKED_FRAMES)
- the episode cap: ``--atari_max_episode_frames=108000`` (ale-py registers ``*NoFrameskip-v4`` with 108,000 frames;
  CleanRL's EnvPool variant caps at 27,000 agent steps = 108,000 frames)
- 40M frames: ``--train_for_env_steps=40000000``

Where sfx's env differs from CleanRL's and no flag changes it: (1) after a lost life CleanRL's wrappers press
FIRE (FireResetEnv runs again on the life's reset, with a no-op step before it and action 2 after it); sfx
presses FIRE only at a game's start and leaves relaunching to the agent. (2) CleanRL resizes the RGB screen and
then converts it to gray; sfx takes ALE's grayscale screen and resizes it (area interpolation in both), so pixel
values differ slightly. (3) The no-op draws come from other random streams.

Backend: the Python envs (the default). ``--env_backend=envpool`` is not used because it serves this protocol less
closely: EnvPool presses FIRE for one emulator frame at a game's start where CleanRL and sfx's Python envs press
it for one agent step (docs/environments/envpool.md), on top of difference (1).

Not CleanRL's: the learning hyperparameters. This run trains sfx's APPO with the atari family's defaults (no
learning flag below), so it measures what a user gets with no tuning and follows the family's defaults when they
change; only the protocol, the budget, the evaluation and the machine's size are set here. The comparison with
CleanRL's PPO is at equal frames.

Evaluation on whole games: every 2M frames the evaluator plays 8 full games with the newest weights, sampling
actions as CleanRL's reported returns do: ``--eval_env_flags=--atari_episodic_life=False`` (without it the
evaluator's envs would take the run's ``--atari_episodic_life=True`` and count every life as an episode). The
training curve ``reward`` is already the whole game's raw score (episodic life ends the agent's episode, not the
game's statistics), as CleanRL's ``charts/episodic_return`` is.

Published anchors (final score, 40M frames, 3 seeds; CleanRL docs/benchmark/ppo_atari*.md): Pong 20.36-20.45,
Breakout 414.7 (gym) / 420.9 (EnvPool + JAX) / 211 +- 152 (EnvPool + torch, one bad seed), BeamRider 1,916-2,679;
OpenAI Baselines ppo2: Pong 20.5, Breakout 406.6, BeamRider 2,643. CleanRL's EnvPool PPO took ~150-180 minutes
per game on 1 GPU + 10 CPUs. sfx's results on this protocol: not yet run.

Machine: 16 rollout workers x 8 envs (a GPU node with 16 or more cores, as runs/atari.py); on a smaller machine
launch one experiment at a time (``--max_parallel=1``). Names start with the game, so ``--only='<game>*'`` picks one.
"""

from sfx_runner import Experiment, ParamGrid, RunDescription

SEEDS = [1, 2, 3]
GAMES = ("pong", "breakout", "beam_rider")
FRAMES = 40_000_000  # CleanRL's 10M agent steps x frameskip 4
EVAL_EVERY_FRAMES = 2_000_000

# the env protocol, flag by flag (each is also the family's default where one exists: written out so that a
# change of the atari family's defaults cannot change the protocol)
PROTOCOL = ("--env_frameskip=4 --atari_sticky_actions=False --atari_full_action_set=False --atari_episodic_life=True "
            "--atari_noop_max=30 --atari_fire_reset=True --atari_max_episode_frames=108000 --reward_clip=1.0")

CMD = (f"python -m sfx.train --train_for_env_steps={FRAMES} --num_workers=16 --num_envs_per_worker=8 "
       f"--worker_num_splits=2 {PROTOCOL} "
       # whole games in evaluation: the evaluator's envs without episodic life
       f"--eval_every_env_steps={EVAL_EVERY_FRAMES} --eval_episodes=8 --eval_num_envs=4 "
       f"--eval_env_flags=--atari_episodic_life=False")

RUN_DESCRIPTION = RunDescription("atari_cleanrl", experiments=[
    Experiment(game, f"{CMD} --env=atari_{game}", ParamGrid([("seed", SEEDS)])) for game in GAMES
])
