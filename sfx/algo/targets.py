"""The one result type of the target recursions (V-trace, GAE)."""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["Targets"]


class Targets(NamedTuple):
    """Value targets and advantages, same shape (``[T, B]`` time-major from ``vtrace`` / ``gae``).

    Attributes:
        returns: what the value head regresses to: V-trace's ``v_s``, or GAE's lambda-returns.
        advantages: the policy-gradient advantages.
    """

    returns: torch.Tensor
    advantages: torch.Tensor
