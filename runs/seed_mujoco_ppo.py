"""SEED RL's tuned HalfCheetah PPO baseline (its ``mujoco/local_baseline_HalfCheetah-v2.sh`` with
``mujoco/gin/ppo.gin``) on gymnasium's current HalfCheetah (``mujoco_halfcheetah`` = HalfCheetah-v5), with sfx's
names:

    python -m sfx.runner.run --run=runs.seed_mujoco_ppo --runner=processes --max_parallel=1

SEED's settings, as its script and gin file give them, and the sfx flag that says the same:

- 8 actors x 32 envs = 256 envs: ``--num_workers=8 --num_envs_per_worker=32``; 2,000,000 env frames.
- unroll length 16: ``--rollout=16 --recurrence=16`` (no RNN: ``--use_rnn=False``).
- 2,048 transitions per learner step, minibatches of 64 transitions ("split" batch mode), 10 epochs:
  ``--batch_size=64 --num_batches_per_iteration=32 --ppo_epochs=10`` (64 = 4 trajectories of 16).
- Adam, learning rate 3e-4 decaying linearly to 0 over the 2M frames (SEED's ``lr_decay_multiplier = 0``), gradient
  clip 0.5: ``--learning_rate=0.0003 --lr_schedule=linear_decay --lr_decay_multiplier=0 --max_grad_norm=0.5``.
- PPO loss with epsilon 0.2, no entropy bonus: ``--policy_loss=ppo --ppo_clip_ratio=0.2 --exploration_loss_coeff=0``.
- GAE, lambda 0.95, discount 0.99: ``--advantage_estimator=gae --gae_lambda=0.95 --gamma=0.99``.
- separate policy and value networks, 2 x 64 tanh each, orthogonal initialisation, a state-independent std:
  ``--actor_critic_share_weights=False --hidden_size=64 --nonlinearity=tanh --policy_initialization=orthogonal
  --adaptive_stddev=False``.
- observation normalisation (running mean and std): ``--normalize_input=True``; rewards normalised by PopArt
  statistics without PopArt's output compensation, which is what a running normaliser of the value targets does:
  ``--normalize_returns=True``.

sfx counts policy lag in learner steps and drops samples past ``--max_policy_lag`` (100 by default): one
iteration here is 32 x 10 = 320 minibatch steps, so the samples would be past it (measured on 2026-11-27
without this flag: lag about 970 steps, and from the second iteration on no valid sample: gradient norm 0, no
training). SEED's learner takes its data as on-policy whatever the steps: ``--max_policy_lag=10000``.

Where sfx differs (not a flag here): SEED clips normalised observations at 10, sfx's normaliser at 5; SEED's
orthogonal gains are sqrt(2) for hidden layers, 0.01 for the policy's last layer and 1 for the value's, sfx's
``--policy_init_gain`` is one gain; SEED's std is ``safe_exp`` with a floor of 1e-3. The value-loss clip is
sfx's default (``--ppo_clip_value=1.0`` in the normalised value units). Learning is asynchronous in sfx
(measured here: samples lag the learner by about three iterations, ~970 minibatch steps; GAE takes them as
on-policy).

Measured against Stable-Baselines3's PPO with the RL Zoo's HalfCheetah hyperparameters at equal env steps (3 seeds
each, 1M env steps, the rate constant), and this command with its decay to 2M (2 seeds: 2080 +- 299 at 2M):
docs/agents/appo.md, "SEED RL's HalfCheetah baseline against SB3's PPO".
"""

from sfx_runner import Experiment, ParamGrid, RunDescription

SEEDS = [1, 2, 3]

CMD = ("python -m sfx.train --env=mujoco_halfcheetah --train_for_env_steps=2000000 "
       "--num_workers=8 --num_envs_per_worker=32 --worker_num_splits=2 --rollout=16 --recurrence=16 --use_rnn=False "
       "--batch_size=64 --num_batches_per_iteration=32 --ppo_epochs=10 --max_policy_lag=10000 "
       "--learning_rate=0.0003 --lr_schedule=linear_decay --lr_decay_multiplier=0 --max_grad_norm=0.5 "
       "--policy_loss=ppo --ppo_clip_ratio=0.2 --exploration_loss_coeff=0 "
       "--advantage_estimator=gae --gae_lambda=0.95 --gamma=0.99 "
       "--actor_critic_share_weights=False --hidden_size=64 --nonlinearity=tanh --policy_initialization=orthogonal "
       "--adaptive_stddev=False --normalize_input=True --normalize_returns=True")

RUN_DESCRIPTION = RunDescription("seed_mujoco_ppo", experiments=[
    Experiment("halfcheetah", CMD, ParamGrid([("seed", SEEDS)])),
])
