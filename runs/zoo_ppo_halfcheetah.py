"""Stable-Baselines3's PPO with the RL Zoo's HalfCheetah hyperparameters, as sfx flags on HalfCheetah-v5: the
line to compare sfx's PPO with SB3's at equal env steps (docs/agents/appo.md, "Measured: the policy losses and
SB3's PPO on HalfCheetah"; SB3's side: ``bench/sb3_baseline.py --algo=ppo --env=HalfCheetah-v5
--hyperparams_from=HalfCheetah-v4``)::

    python -m sfx.runner.run --run=runs.zoo_ppo_halfcheetah --runner=processes --max_parallel=1

The zoo's entry (rl_zoo3 2.9.2, ``hyperparams/ppo.yml``, HalfCheetah-v4) and its sfx flags:

- ``n_envs: 1, n_steps: 512``: 512 samples per iteration; sfx steps 8 envs of one worker for 64 steps each
  (``--num_workers=1 --num_envs_per_worker=8 --rollout=64``), 8 trajectories per iteration
  (``--batch_size=64 --num_batches_per_iteration=8``);
- ``batch_size: 64, n_epochs: 20``: minibatches of 64 single transitions shuffled across the whole rollout, 20
  passes: ``--minibatch_unit=transitions --batch_size=64 --ppo_epochs=20`` (with sfx's default, whole 64-step
  trajectories, the same settings reached a third of SB3's return at 100k env steps);
- ``learning_rate: 2.0633e-05``, ``gamma: 0.98``, ``gae_lambda: 0.92``, ``clip_range: 0.1``, ``max_grad_norm:
  0.8``, ``ent_coef: 0.000401762``: ``--learning_rate --gamma --advantage_estimator=gae --gae_lambda
  --ppo_clip_ratio --max_grad_norm --exploration_loss_coeff``; SB3's Adam has ``eps=1e-5``: ``--adam_eps=1e-5``;
- ``vf_coef: 0.58096``: SB3's value loss is the mean squared error, sfx's is half of it, so
  ``--value_loss_coeff=1.16192`` is the same weight; no value clip (SB3's ``clip_range_vf=None``):
  ``--ppo_clip_value=0``; advantages normalised per minibatch: ``--advantage_normalization=minibatch``;
- ``policy_kwargs: log_std_init=-2, ortho_init=False, activation_fn=nn.ReLU, net_arch=dict(pi=[256, 256],
  vf=[256, 256])``: a state-independent log-std starting at -2 (``--adaptive_stddev=False
  --initial_stddev=0.1353``), PyTorch's default initialisation (``--policy_initialization=torch_default``), two
  separate ReLU networks of two 256-unit layers (``--actor_critic_share_weights=False --hidden_size=256
  --nonlinearity=relu``; the mujoco family's ``mlp_mujoco`` encoder is two layers, no RNN);
- ``normalize: true`` (VecNormalize: observations and rewards): ``--normalize_input=True`` (the family's default)
  and ``--normalize_returns=True`` (the value targets' scale, the family's default).

- SB3 collects a rollout with the current weights, then trains on it: ``--serial_mode=True`` (every component in
  one process, in turn: synchronous). sfx's default asynchronous layout keeps the envs stepping while the learner
  trains, so here (the learner sets the pace) each batch was acted by weights two iterations (~300 learner steps)
  older than those it starts training with; measured at 100k env steps it learned less (docs/agents/appo.md).

``--max_policy_lag=10000``: 8 x 20 = 160 minibatch steps per iteration put every sample past sfx's default of 100
(SB3 trains each rollout for its 20 epochs whatever their count).

Without the normalisers on either side, one iteration of this line is SB3's to float32 rounding, minibatch by
minibatch from the same weights and rollout: ``python -m bench.sb3_ppo_update`` checks it.

Where sfx differs (not a flag here): SB3's VecNormalize divides the rewards by the running spread of the discounted
return and clips observations at 10, sfx normalises the value targets (mean and spread) and clips observations at 5;
SB3's observation statistics move with every env step, sfx's after every iteration.
"""

from sfx_runner import Experiment, ParamGrid, RunDescription

SEEDS = [1, 2, 3]

CMD = ("python -m sfx.train --env=mujoco_halfcheetah --train_for_env_steps=1000000 "
       "--serial_mode=True --num_workers=1 --num_envs_per_worker=8 --rollout=64 --use_rnn=False "
       "--batch_size=64 --num_batches_per_iteration=8 --ppo_epochs=20 --minibatch_unit=transitions "
       "--max_policy_lag=10000 --learning_rate=2.0633e-05 --adam_eps=1e-5 --gamma=0.98 "
       "--advantage_estimator=gae --gae_lambda=0.92 --ppo_clip_ratio=0.1 --ppo_clip_value=0 --max_grad_norm=0.8 "
       "--value_loss_coeff=1.16192 --exploration_loss_coeff=0.000401762 --advantage_normalization=minibatch "
       "--hidden_size=256 --nonlinearity=relu --actor_critic_share_weights=False --adaptive_stddev=False "
       "--initial_stddev=0.1353 --policy_initialization=torch_default "
       "--normalize_input=True --normalize_returns=True")

RUN_DESCRIPTION = RunDescription("zoo_ppo_halfcheetah", experiments=[
    Experiment("halfcheetah", CMD, ParamGrid([("seed", SEEDS)])),
])
