"""Self-play population-based training on VizDoom, sized for a big machine (e.g. 72 cores + a GPU).

    python -m sfx.runner.run --run=runs.pbt_doom_duel --runner=processes --dry_run

- ``duel``: doom_duel, 8 policies in one training; every match puts two policies of the
  population against each other (``--pbt_mix_policies_in_one_env``). Every 5M frames of a policy
  the weakest copy the strongest and hyperparameters, including the reward-shaping weights, are
  mutated. Frags, deaths, hits and damage per policy are in TensorBoard (``episode/*``).
- ``deathmatch_bots``: doom_deathmatch_bots (each match: 1 agent + 7 built-in bots), 4 policies.

2 seeds each. ``runs.pbt_doom_duel_small`` is the same idea on 2 CPU cores.
"""

from sfx_runner import Experiment, ParamGrid, RunDescription

SEEDS = [1, 2]

PBT = ("--with_pbt=True --pbt_mix_policies_in_one_env=True --pbt_period_env_steps=5000000 "
       "--pbt_start_mutation=100000000 --pbt_replace_fraction=0.2 --pbt_mutation_rate=0.15 "
       "--pbt_replace_reward_gap=0.1 --pbt_replace_reward_gap_absolute=0.1 --pbt_optimize_gamma=True")

SHAPING = "--doom_reward_shaping=kill=1,death=-0.5,damage=0.01,item=0.05"

DUEL = ("python -m sfx.train --env=doom_duel --train_for_env_steps=2000000000 --num_workers=72 "
        "--num_envs_per_worker=8 --worker_num_splits=2 --rollout=32 --recurrence=32 --batch_size=2048 "
        f"--use_rnn=True --num_policies=8 {PBT} {SHAPING} --learning_rate=0.0001 --doom_timelimit_min=4.0 "
        "--device=gpu")

DEATHMATCH_BOTS = ("python -m sfx.train --env=doom_deathmatch_bots --train_for_env_steps=2000000000 "
                   "--num_workers=72 --num_envs_per_worker=8 --worker_num_splits=2 --rollout=32 --recurrence=32 "
                   f"--batch_size=2048 --use_rnn=True --num_policies=4 {PBT} {SHAPING} --learning_rate=0.0001 "
                   "--doom_timelimit_min=4.0 --device=gpu")

RUN_DESCRIPTION = RunDescription("pbt_doom_duel", experiments=[
    Experiment("duel", DUEL, ParamGrid([("seed", SEEDS)])),
    Experiment("deathmatch_bots", DEATHMATCH_BOTS, ParamGrid([("seed", SEEDS)])),
])
