"""Self-play population-based training on doom_duel: 8 policies in one training, 2 seeds.

    python -m sfx.runner.run --run=runs.pbt_doom_duel --runner=processes --dry_run

Every match puts two policies of the population against each other; every 5M frames the weakest
policies copy the strongest ones and their hyperparameters are mutated. Sized for a big machine
(72 rollout workers, a GPU). The ``--with_pbt`` / ``--pbt_*`` flags (Sample Factory 1.x names and
meanings) come with sfx's PBT; until a version of sfx.train has them, only ``--dry_run`` is useful.
"""

from sfx_runner import Experiment, ParamGrid, RunDescription

SEEDS = [1, 2]

CMD = ("python -m sfx.train --env=doom_duel --train_for_env_steps=2000000000 --num_workers=72 "
       "--num_envs_per_worker=8 --worker_num_splits=2 --rollout=32 --recurrence=32 --batch_size=2048 "
       "--use_rnn=True --num_policies=8 --with_pbt=True --pbt_mix_policies_in_one_env=True "
       "--pbt_period_env_steps=5000000 --pbt_start_mutation=100000000 --pbt_replace_fraction=0.2 "
       "--pbt_mutation_rate=0.15 --pbt_replace_reward_gap=0.1 --pbt_replace_reward_gap_absolute=0.1 "
       "--pbt_optimize_gamma=True --learning_rate=0.0001 --doom_timelimit_min=4.0")

RUN_DESCRIPTION = RunDescription("pbt_doom_duel", experiments=[
    Experiment("duel", CMD, ParamGrid([("seed", SEEDS)])),
])
