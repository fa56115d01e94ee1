"""The Procgen Benchmark's protocols, easy mode, 25M steps: StarPilot, BigFish, BossFight x 3 seeds, each trained on
200 levels and tested on the full distribution (``<game>_levels200``), and trained on the full distribution
(``<game>_full``): 18 experiments.

    python -m sfx.runner.run --run=runs.procgen --backend=processes --max_parallel=1
    python -m sfx.runner.run --run=runs.procgen --only='starpilot_levels200*' --backend=processes
    python -m sfx.runner.run --run=runs.procgen --runner=slurm --slurm_gpus_per_job=1 --slurm_cpus_per_gpu=16
    python -m sfx.runner.run --run=runs.procgen --dry_run       # the 18 command lines

Units: frames = env steps = agent steps here. Procgen has no frame skip (one game frame per agent step;
the procgen_ family refuses ``--env_frameskip`` other than 1), so the paper's 25M timesteps are
``--train_for_env_steps=25000000`` and sfx's frame counters.

The protocol (Cobbe, Hesse, Hilton, Schulman 2020, "Leveraging Procedural Generation to Benchmark Reinforcement
Learning", sec. 2.2 and the appendix; OpenAI's train-procgen), and the sfx flag of each setting:

- easy mode: ``--procgen_distribution_mode=easy``
- generalization: train on 200 levels, ``--procgen_num_levels=200 --procgen_start_level=0``, test on the full
  distribution of levels: the evaluator's envs get ``--eval_env_flags=--procgen_num_levels=0`` (the run's
  ``--procgen_num_levels`` applies to the training envs only). eval/reward is the test score; the training
  curve ``reward`` (sampled actions, on the 200 levels) is the train score.
- the full-distribution variant: training and evaluation on ``--procgen_num_levels=0``
- 25M steps: ``--train_for_env_steps=25000000``
- 64 parallel envs: ``--num_workers=8 --num_envs_per_worker=8`` (for APPO the number of envs changes only how
  varied a batch is; the batch size and rollout are the family's)
- the paper's PPO hyperparameters (IMPALA-CNN, discount 0.999, learning rate 5e-4, entropy 0.01, 256-step rollouts,
  8 minibatches x 3 epochs, gradient clip 0.5, normalized returns) are the procgen_ family's defaults
  (``sfx.envs.procgen``), so no learning flag is set here; sfx trains them with APPO (V-trace) where the paper used
  PPO with GAE.

Backend: EnvPool, procgen_'s only one (the C++ of procgen 0.10.7; the system Qt 5 runtime, scripts/install_qt5.sh).

Evaluation: every 1M steps the evaluator plays 16 episodes (4 envs) with the newest weights, sampling actions.
Each evaluation's envs are seeded anew, and with ``--procgen_num_levels=0`` every episode plays a level drawn from
the whole level set.

Published anchors (25M steps, easy mode): PPO (the paper, openai/train-procgen): mean normalized score over the 16
games 0.646 trained on the full distribution, 0.600 train / 0.355 test trained on 200 levels; StarPilot 34.2 on the
full distribution, 30.6 train / 23.5 test with 200 levels. CleanRL's ppo_procgen.py (full distribution):
StarPilot 31.0, BossFight 8.85, BigFish 16.5. sfx's results on this protocol: not yet run.

Machine: 8 rollout workers x 8 envs (a GPU node; the IMPALA-CNN learner wants the GPU). Names start with the game.
"""

from sfx_runner import Experiment, ParamGrid, RunDescription

SEEDS = [1, 2, 3]
GAMES = ("starpilot", "bigfish", "bossfight")
STEPS = 25_000_000  # = frames: no frame skip
TRAIN_LEVELS = 200
EVAL_EVERY_STEPS = 1_000_000

CMD = (f"python -m sfx.train --train_for_env_steps={STEPS} --num_workers=8 --num_envs_per_worker=8 "
       f"--worker_num_splits=2 --env_frameskip=1 --procgen_distribution_mode=easy "
       f"--eval_every_env_steps={EVAL_EVERY_STEPS} --eval_episodes=16 --eval_num_envs=4")

# (name suffix, training levels, the evaluator's own env flags: the test distribution where it differs)
VARIANTS = (
    ("levels200", f"--procgen_num_levels={TRAIN_LEVELS} --procgen_start_level=0 --eval_env_flags=--procgen_num_levels=0"),
    ("full", "--procgen_num_levels=0 --procgen_start_level=0"),
)

RUN_DESCRIPTION = RunDescription("procgen", experiments=[
    Experiment(f"{game}_{suffix}", f"{CMD} {levels} --env=procgen_{game}", ParamGrid([("seed", SEEDS)]))
    for game in GAMES for suffix, levels in VARIANTS
])
