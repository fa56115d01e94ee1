"""CLEAR's behavioural cloning terms on replayed experience (Rolnick et al. 2019, "Experience Replay for
Continual Learning", https://arxiv.org/abs/1811.11682, section 3).

On replayed samples only, two terms keep the current network close to what it did when it acted:

    policy cloning = mean_{replayed valid} sum_a mu(a|x) log(mu(a|x) / pi(a|x))  = KL(mu || pi)
    value cloning  = mean_{replayed valid} (V(x) - V_mu(x))^2

``mu`` is the behaviour policy (the distribution stored when the sample was acted), ``pi`` the current
one; ``V_mu`` the value stored at acting time, ``V`` the current value (both in the value head's units, so
normalized returns or PopArt compare like with like). Fresh samples do not enter either term.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from sfx.algo.ppo import masked_mean

__all__ = ["CloningTerms", "clear_cloning_terms"]


class CloningTerms(NamedTuple):
    policy_cloning: torch.Tensor  # scalar
    value_cloning: torch.Tensor   # scalar


def clear_cloning_terms(kl_behaviour_current: torch.Tensor, values: torch.Tensor, behaviour_values: torch.Tensor,
                        valids: torch.Tensor, replayed: torch.Tensor) -> CloningTerms:
    """CLEAR's two cloning terms (module docstring).

    Args:
        kl_behaviour_current: ``[B, T]`` ``KL(mu || pi)`` per sample (with gradient through ``pi``).
        values: ``[B, T]`` current values (with gradient), in the value head's units.
        behaviour_values: ``[B, T]`` the values stored at acting time, in the same units.
        valids: ``[B, T]`` bool, the samples that count.
        replayed: ``[B]`` bool, the trajectories that came from a replay buffer.

    Returns:
        ``CloningTerms``: means over replayed valid samples (0 when there are none).
    """
    mask = valids & replayed.reshape(-1, 1)
    return CloningTerms(policy_cloning=masked_mean(kl_behaviour_current, mask),
                        value_cloning=masked_mean((values - behaviour_values.detach()) ** 2, mask))
