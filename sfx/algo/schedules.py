"""Learning-rate schedules (``--lr_schedule``): the factor every learning rate of an agent is multiplied by, as a
function of the env steps trained so far, or adapted to the policy's KL divergence.

- ``constant``: 1 throughout.
- ``linear_decay`` (Sample Factory 2's name; SEED RL's PPO schedule, the RL Zoo's ``lin_<lr>``): the learning rate
  falls in a straight line from its flag's value at env step 0 to ``--lr_decay_multiplier`` times it at
  ``--train_for_env_steps``, and stays there (a run resumed past its end, or one whose last iteration overshoots).
  SEED decays to 0 (``lr_decay_multiplier = 0``) over its ``total_environment_frames``, Sample Factory and the RL
  Zoo to 0 over the run's steps.
- ``kl_adaptive_minibatch``, ``kl_adaptive_epoch`` (Sample Factory 2's names; the rule of rl_games' and rsl_rl's
  PPO, Rudin et al. 2021, "Learning to Walk in Minutes Using Massively Parallel Deep Reinforcement Learning"):
  after each minibatch step (or each epoch, on the epoch's mean), the KL divergence of the current policy from the
  behaviour policy on the trained samples moves the rate: above twice ``--lr_schedule_kl_threshold`` it is divided
  by 1.5, below half of it multiplied by 1.5, within ``[--lr_adaptive_min, --lr_adaptive_max]``
  (:func:`kl_adaptive_lr`). Only an agent with a policy KL (APPO) offers them.

The linear factor depends only on the env-step count, which checkpoints keep, so a resumed run goes on from the rate
it had, and with several ranks (which count every rank's steps) every rank computes the same rate. The adapted rate
is learner state (checkpointed), and with several ranks it adapts to the ranks' mean KL.
"""

from __future__ import annotations

# schedules that are a function of the env steps (the learner sets them) and those the agent adapts to its KL
ENV_STEP_SCHEDULES = ("constant", "linear_decay")
KL_ADAPTIVE_SCHEDULES = ("kl_adaptive_minibatch", "kl_adaptive_epoch")
LR_SCHEDULES = ENV_STEP_SCHEDULES + KL_ADAPTIVE_SCHEDULES
# the KL-adaptive rule's constants (rl_games', Sample Factory 2's): the band is [threshold / 2, 2 * threshold],
# a step changes the rate by a factor 1.5
KL_BAND_FACTOR = 2.0
KL_LR_FACTOR = 1.5


def linear_lr_factor(env_steps: float, total_env_steps: float, final_fraction: float = 0.0) -> float:
    """``1 - (1 - final_fraction) * min(env_steps / total_env_steps, 1)``: 1 at step 0, ``final_fraction`` at
    ``total_env_steps`` and after.

    Raises:
        ValueError: ``total_env_steps`` not > 0, ``env_steps`` < 0 or ``final_fraction`` outside [0, 1].
    """
    if not total_env_steps > 0:
        raise ValueError(f"total_env_steps={total_env_steps} must be > 0")
    if not env_steps >= 0:
        raise ValueError(f"env_steps={env_steps} must be >= 0")
    if not 0.0 <= final_fraction <= 1.0:
        raise ValueError(f"final_fraction={final_fraction} must be in [0, 1]")
    progress = min(env_steps / total_env_steps, 1.0)
    return 1.0 - (1.0 - final_fraction) * progress


def kl_adaptive_lr(lr: float, kl: float, threshold: float, lr_min: float, lr_max: float) -> float:
    """The next learning rate after a step (or epoch) whose policy KL divergence was ``kl``::

        kl > 2 * threshold:  max(lr / 1.5, lr_min)
        kl < threshold / 2:  min(lr * 1.5, lr_max)
        else:                lr

    A non-finite ``kl`` leaves ``lr`` as it is (the learner skips such a minibatch).

    Raises:
        ValueError: ``threshold`` not > 0, or not ``0 < lr_min <= lr_max``.
    """
    if not threshold > 0:
        raise ValueError(f"threshold={threshold} must be > 0")
    if not 0 < lr_min <= lr_max:
        raise ValueError(f"lr_min={lr_min}, lr_max={lr_max}: need 0 < lr_min <= lr_max")
    if kl > KL_BAND_FACTOR * threshold:
        return max(lr / KL_LR_FACTOR, lr_min)
    if kl < threshold / KL_BAND_FACTOR:
        return min(lr * KL_LR_FACTOR, lr_max)
    return lr


def lr_factor(schedule: str, env_steps: float, total_env_steps: float, final_fraction: float = 0.0) -> float:
    """The factor of ``schedule`` (one of :data:`ENV_STEP_SCHEDULES`) after ``env_steps`` of a run of
    ``total_env_steps``; ``final_fraction``: ``linear_decay``'s factor at the end.

    Raises:
        ValueError: another schedule (named, with these), or bad numbers (see :func:`linear_lr_factor`).
    """
    if schedule == "constant":
        return 1.0
    if schedule == "linear_decay":
        return linear_lr_factor(env_steps, total_env_steps, final_fraction)
    raise ValueError(f"{schedule!r} is not a learning-rate schedule of env steps; those are: "
                     f"{', '.join(ENV_STEP_SCHEDULES)}")
