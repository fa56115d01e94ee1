"""How an on-policy iteration's samples are cut into minibatches: whole trajectories, or single transitions.

PPO (Schulman et al. 2017, "Proximal Policy Optimization Algorithms", Algorithm 1) collects ``N`` trajectories of
``T`` steps, computes the advantages, then "optimize[s] surrogate L wrt theta, with K epochs and minibatch size
M <= NT". Two ways of forming those minibatches are in use:

* ``trajectory_minibatches``: every epoch a random permutation of the ``N`` trajectories, cut into groups of
  ``k`` whole trajectories (IMPALA / Sample Factory's APPO, and what a recurrent core needs: a minibatch is
  replayed from the core's stored state through consecutive steps). The targets are recomputed per minibatch.
* ``transition_minibatches``: every epoch a random permutation of the ``N * T`` single transitions, cut into
  groups of ``M`` (OpenAI Baselines' ppo2, Stable-Baselines3's PPO): a minibatch mixes steps of every trajectory
  and every part of them. GAE needs the rest of a step's trajectory, so the advantages and value targets are
  computed once, over whole trajectories, before the first epoch; each minibatch then carries its steps' own.

For epoch ``e`` with permutation ``p_e`` of ``range(N * T)`` (flat index ``i = b * T + t``: trajectory ``b``,
step ``t``), minibatch ``j`` is ``p_e[j M : (j + 1) M]``; every transition is in exactly one minibatch of each
epoch. ``gather_transitions`` turns such a set of ``(b, t)`` into a minibatch of ``M`` one-step trajectories.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import torch

__all__ = ["NEXT_STEP_FIELDS", "PER_TRAJECTORY_FIELDS", "gather_transitions", "trajectory_minibatches",
           "transition_minibatches"]

# fields stored for T + 1 steps (index T: after the last step; what a one-step trajectory needs to bootstrap)
NEXT_STEP_FIELDS = ("obs", "rnn_states")
# fields stored once per trajectory: [B, ...]
PER_TRAJECTORY_FIELDS = ("task", "memory", "replayed")


def trajectory_minibatches(num_trajectories: int, per_minibatch: int, epochs: int,
                           device: torch.device | str | None = None) -> list[torch.Tensor]:
    """Trajectory indices of every minibatch of every epoch, in training order.

    Args:
        num_trajectories: ``N``, the trajectories of the iteration.
        per_minibatch: ``k >= 1`` trajectories per minibatch (the last of an epoch may have fewer).
        epochs: ``K >= 1`` passes over the ``N`` trajectories.

    Returns:
        ``K * ceil(N / k)`` int64 tensors: for each epoch a fresh ``torch.randperm(N)`` (all drawn before the
        first minibatch, so the random stream after this call does not depend on what the steps draw), cut into
        consecutive groups of ``k``.
    """
    _check_positive(num_trajectories=num_trajectories, per_minibatch=per_minibatch, epochs=epochs)
    return [perm[start:start + per_minibatch]
            for perm in (torch.randperm(num_trajectories, device=device) for _ in range(epochs))
            for start in range(0, num_trajectories, per_minibatch)]


def transition_minibatches(num_trajectories: int, rollout: int, minibatch_size: int, epochs: int,
                           device: torch.device | str | None = None) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(trajectory, step)`` indices of every minibatch of every epoch, in training order (module docstring).

    Args:
        num_trajectories: ``N``.
        rollout: ``T``, steps per trajectory.
        minibatch_size: ``M >= 1`` transitions per minibatch (the last of an epoch has ``N T mod M`` when that is
            not 0).
        epochs: ``K >= 1``.

    Returns:
        ``K * ceil(N T / M)`` pairs of int64 ``[M]`` tensors ``(b, t)``; each epoch's draw is one
        ``torch.randperm(N * T)`` of the flat index ``b * T + t``, all drawn before the first minibatch.
    """
    _check_positive(num_trajectories=num_trajectories, rollout=rollout, minibatch_size=minibatch_size, epochs=epochs)
    total = num_trajectories * rollout
    perms = [torch.randperm(total, device=device) for _ in range(epochs)]
    return [(flat // rollout, flat % rollout)
            for perm in perms for flat in (perm[start:start + minibatch_size] for start in range(0, total, minibatch_size))]


def gather_transitions(data: Mapping[str, Any], traj: torch.Tensor, step: torch.Tensor,
                       next_step_fields: Iterable[str] = NEXT_STEP_FIELDS,
                       per_trajectory_fields: Iterable[str] = PER_TRAJECTORY_FIELDS) -> dict[str, Any]:
    """The transitions ``(traj[i], step[i])`` of batch-major trajectories as ``M`` one-step trajectories.

    Args:
        data: fields by name, a field either a tensor or a dict of tensors (``obs``). A field named in
            ``next_step_fields`` is ``[B, T + 1, ...]`` and becomes ``[M, 2, ...]`` (the step and the one after
            it: the one-step trajectory's bootstrap); one in ``per_trajectory_fields`` is ``[B, ...]`` and
            becomes ``[M, ...]`` (its trajectory's); any other is per step, ``[B, T, ...]`` -> ``[M, 1, ...]``.
        traj, step: ``[M]`` int64, as :func:`transition_minibatches` gives them.

    Returns:
        A new dict of the same fields (dicts of tensors stay dicts); ``data`` is not changed.
    """
    next_step, per_trajectory = set(next_step_fields), set(per_trajectory_fields)

    def take(name: str, value: torch.Tensor) -> torch.Tensor:
        if name in per_trajectory:
            return value[traj]
        if name in next_step:
            return torch.stack([value[traj, step], value[traj, step + 1]], dim=1)
        return value[traj, step].unsqueeze(1)

    return {name: ({k: take(name, v) for k, v in value.items()} if isinstance(value, Mapping) else take(name, value))
            for name, value in data.items()}


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}={value!r} must be an integer >= 1")
