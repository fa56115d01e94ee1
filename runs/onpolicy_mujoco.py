"""The recommendations of "What Matters in On-Policy Reinforcement Learning? A Large-Scale Empirical Study"
(Andrychowicz et al. 2021) for continuous control, as sfx flags, on five MuJoCo tasks, and the study's policy
losses side by side on HalfCheetah:

    python -m sfx.runner.run --run=runs.onpolicy_mujoco --runner=processes --max_parallel=1
    python -m sfx.runner.run --run=runs.onpolicy_mujoco --only='*loss_*' --runner=processes --max_parallel=1

The study's recommendations and the flags that follow them:

- the PPO policy loss, clipping threshold 0.25 to start with: ``--policy_loss=ppo --ppo_clip_ratio=0.25``;
- GAE with lambda 0.9, and no PPO-style value clipping: ``--advantage_estimator=gae --gae_lambda=0.9
  --ppo_clip_value=0``;
- separate policy and value networks with tanh activations: ``--actor_critic_share_weights=False
  --nonlinearity=tanh``;
- always normalise observations (``--normalize_input=True``); value normalisation is worth checking (kept on:
  the mujoco family's ``--normalize_returns=True``); gradient clipping is secondary (the family's 3.5 kept);
- discount 0.99 to start with, Adam with beta1 0.9 and learning rate 3e-4: ``--gamma=0.99 --adam_beta1=0.9
  --learning_rate=0.0003``;
- go over the experience several times: ``--ppo_epochs=10``; no regulariser helped significantly:
  ``--exploration_loss_coeff=0 --kl_loss_coeff=0``.

Not expressible as sfx flags today: the 100x smaller initial weights of the policy's last layer, a softplus
standard deviation with a negative input offset, tanh-squashed actions (sfx clips the Gaussian's samples to the
action bounds), a value network wider than the policy network (sfx's two networks share ``--hidden_size``).
Minibatches here are whole trajectories (sfx's default), whose advantages are recomputed with the current weights
at every minibatch, which covers the study's "recompute once per pass"; ``--minibatch_unit=transitions`` shuffles
single transitions instead, with the advantages computed once per iteration (the study's "shuffle transitions").

The ``loss_*`` experiments change only ``--policy_loss`` (with each loss's own parameters at their defaults:
AWR beta 1 and weight clip 20 on the normalised advantages, V-MPO eps_eta 0.01 and eps_alpha 0.005) on
HalfCheetah: the table of returns at 1M env steps, 3 seeds (``--only`` takes a shell pattern on the numbered
experiment names, hence ``'*loss_*'``; measured on 2026-11-28: docs/agents/appo.md, "the policy losses at 1M env
steps").
"""

from sfx_runner import Experiment, ParamGrid, RunDescription

SEEDS = [1, 2, 3]
TASKS = ("halfcheetah", "hopper", "walker", "ant", "humanoid")

RECOMMENDED = ("--train_for_env_steps=1000000 --num_workers=4 --num_envs_per_worker=8 --worker_num_splits=2 "
               "--rollout=64 --recurrence=64 --use_rnn=False --batch_size=512 --num_batches_per_iteration=4 "
               "--ppo_epochs=10 --policy_loss=ppo --ppo_clip_ratio=0.25 --advantage_estimator=gae --gae_lambda=0.9 "
               "--ppo_clip_value=0 --actor_critic_share_weights=False --nonlinearity=tanh --normalize_input=True "
               "--normalize_returns=True --gamma=0.99 --adam_beta1=0.9 --learning_rate=0.0003 "
               "--exploration_loss_coeff=0 --kl_loss_coeff=0")

RUN_DESCRIPTION = RunDescription("onpolicy_mujoco", experiments=[
    *(Experiment(f"recommended_{task}", f"python -m sfx.train --env=mujoco_{task} {RECOMMENDED}",
                 ParamGrid([("seed", SEEDS)])) for task in TASKS),
    *(Experiment(f"loss_{loss}", f"python -m sfx.train --env=mujoco_halfcheetah {RECOMMENDED} --policy_loss={loss}",
                 ParamGrid([("seed", SEEDS)])) for loss in ("ppo", "vpg", "awr", "vmpo")),
])
