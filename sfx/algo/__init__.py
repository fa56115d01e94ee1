"""Pure RL math: V-trace, GAE, PPO losses, the APPO step's targets and loss terms, action
distributions, normalizers, PopArt.

Tensors and scalars in, tensors out; no processes and no cfg objects here.
"""

from sfx.algo.appo import APPOParams, LossTerms, TrajectoryOutputs, appo_loss_terms, appo_targets
from sfx.algo.distributions import (
    ActionDistribution,
    UnsupportedActionSpaceError,
    action_params_size,
    action_shape,
    action_to_env,
    make_action_distribution,
)
from sfx.algo.gae import gae
from sfx.algo.targets import scale_rewards
from sfx.algo.normalizers import RunningMeanStd
from sfx.algo.nstep import NStepTargets, n_step_targets
from sfx.algo.popart import (PopArtStats, PopArtStep, popart_advantages, popart_normalize, popart_preserve_,
                             popart_step, popart_unnormalize, popart_update, select_task_values)
from sfx.algo.policy_losses import (AWRLoss, VMPOLoss, awr_loss, top_half_mask, vmpo_dual_init, vmpo_duals, vmpo_loss,
                                    vpg_loss)
from sfx.algo.ppo import entropy_loss, kl_loss, masked_mean, ppo_policy_loss, ppo_value_loss
from sfx.algo.prioritized import PrioritizedSample, PrioritizedSampler, SumTree
from sfx.algo.returns import monte_carlo_returns, nstep_returns
from sfx.algo.qlearning import (DoubleQTargets, R2D2Loss, actor_epsilons, double_q_targets, importance_weights,
                                r2d2_loss, sequence_priorities, td_errors, value_rescale, value_rescale_inverse)
from sfx.algo.sac import (SAC_LOG_STD_MAX, SAC_LOG_STD_MIN, CriticLoss, SquashedGaussian, SquashedSample, actor_loss,
                          check_action_bounds, clipped_double_q_target, critic_loss, default_target_entropy,
                          polyak_update_, temperature_loss)
from sfx.algo.targets import Targets
from sfx.algo.vtrace import vtrace

__all__ = [
    "APPOParams",
    "LossTerms",
    "Targets",
    "TrajectoryOutputs",
    "appo_loss_terms",
    "appo_targets",
    "scale_rewards",
    "ActionDistribution",
    "UnsupportedActionSpaceError",
    "action_params_size",
    "action_shape",
    "action_to_env",
    "make_action_distribution",
    "gae",
    "RunningMeanStd",
    "PopArtStats",
    "PopArtStep",
    "popart_advantages",
    "popart_normalize",
    "popart_preserve_",
    "popart_step",
    "popart_unnormalize",
    "popart_update",
    "select_task_values",
    "entropy_loss",
    "kl_loss",
    "masked_mean",
    "ppo_policy_loss",
    "ppo_value_loss",
    "vtrace",
    "nstep_returns",
    "monte_carlo_returns",
    "AWRLoss",
    "VMPOLoss",
    "awr_loss",
    "top_half_mask",
    "vmpo_dual_init",
    "vmpo_duals",
    "vmpo_loss",
    "vpg_loss",
    "NStepTargets",
    "n_step_targets",
    "PrioritizedSample",
    "PrioritizedSampler",
    "SumTree",
    "DoubleQTargets",
    "R2D2Loss",
    "actor_epsilons",
    "double_q_targets",
    "importance_weights",
    "r2d2_loss",
    "sequence_priorities",
    "td_errors",
    "value_rescale",
    "value_rescale_inverse",
    "SAC_LOG_STD_MAX",
    "SAC_LOG_STD_MIN",
    "CriticLoss",
    "SquashedGaussian",
    "SquashedSample",
    "actor_loss",
    "check_action_bounds",
    "clipped_double_q_target",
    "critic_loss",
    "default_target_entropy",
    "polyak_update_",
    "temperature_loss",
]
