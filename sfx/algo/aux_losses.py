"""Auxiliary representation losses: frame reconstruction and future-frame prediction.

Both follow Brain Agent (Kakao Brain 2022), whose DMLab-30 agent adds two self-supervised terms to
V-trace:

* **Reconstruction** (coefficient 0.01 there): a decoder maps the encoder's features of ``o_t``
  back to the frame ``o_t``; the squared error shapes the encoder (its gradient reaches the encoder).
* **Future prediction** (coefficient 1.0 there), after Gregor et al. 2019, "Shaping Belief States
  with Generative Environment Models for RL": from the core's belief ``b_t`` and the actions
  actually taken ``a_t .. a_{t+k-1}`` a causal model predicts the frame ``o_{t+k}`` for
  ``k = 1 .. K``; the error shapes the core's state into a belief about what comes next. Only
  frames of the same episode are targets (:func:`future_mask`), and for cost only a few start
  times and horizons per trajectory are decoded (:func:`sample_start_times`,
  :func:`sample_horizons`).

Frames are compared in ``[-1, 1]`` (:func:`frame_targets`), where the decoders' final tanh lives.
Everything here is pure tensor math: shapes in, scalars out; the modules are in
``sfx.models.aux_heads``.
"""

from __future__ import annotations

import torch

from sfx.algo.ppo import masked_mean

__all__ = [
    "frame_targets",
    "per_sample_mse",
    "reconstruction_loss",
    "future_mask",
    "future_prediction_loss",
    "sample_start_times",
    "sample_horizons",
]


def frame_targets(frames: torch.Tensor) -> torch.Tensor:
    """Frames as regression targets in ``[-1, 1]``.

    Args:
        frames: ``[N, C, H, W]`` already in CHW (the caller permutes the env's layout). Integer
            frames are taken as pixels ``0..255``; float frames are assumed to be in ``[-1, 1]``
            already (e.g. ``[0, 1]`` images) and are only clamped to it, so a decoder ending in
            tanh can reach every target.

    Returns:
        ``[N, C, H, W]`` float32: ``x / 127.5 - 1`` for integer frames, ``clamp(x, -1, 1)`` else.
    """
    if frames.is_floating_point():
        return frames.float().clamp(-1.0, 1.0)
    return frames.float().div_(127.5).sub_(1.0)


def per_sample_mse(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``pred, target [N, ...]`` -> ``[N]``: the mean squared error of each sample over all its
    elements (``target`` carries no gradient)."""
    if pred.shape != target.shape:
        raise ValueError(f"prediction shape {tuple(pred.shape)} differs from target shape {tuple(target.shape)}")
    return (pred.float() - target.detach().float()).square().flatten(1).mean(dim=1)


def reconstruction_loss(pred: torch.Tensor, target: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Brain Agent's reconstruction term: ``mean_{n valid} mean_{c,h,w} (pred - target)^2``.

    Args:
        pred: ``[N, C, H, W]`` decoded frames (tanh output, with gradient).
        target: ``[N, C, H, W]`` :func:`frame_targets` of the observed frames.
        valid: ``[N]`` bool, the samples that count.

    Returns:
        A scalar; ``0`` (still attached to ``pred``'s graph, with zero gradient) when no sample is
        valid, so the learner can always add and backpropagate it.
    """
    return masked_mean(per_sample_mse(pred, target), valid)


def future_mask(dones: torch.Tensor, valids: torch.Tensor, horizon: int) -> torch.Tensor:
    """Which (start, horizon) pairs of a trajectory have a future frame of the same episode.

    A trajectory of ``T`` steps holds ``T + 1`` observations ``o_0 .. o_T``; a done at step ``s``
    means ``o_{s+1}`` is already the next episode's first frame (envs auto-reset). The target
    ``o_{t+k}`` of start ``t`` and horizon ``k`` counts iff

        t + k <= T  and  valids[b, t]  and  not any(dones[b, t : t + k])

    Args:
        dones: ``[B, T]`` bool, the episode ended at that step.
        valids: ``[B, T]`` bool, the start samples that count.
        horizon: ``K >= 1``, the largest ``k``.

    Returns:
        ``[B, T, K]`` bool; entry ``(b, t, k - 1)`` is the condition above.
    """
    if horizon < 1:
        raise ValueError(f"future_mask: horizon={horizon} is not valid; allowed: an integer >= 1")
    B, T = dones.shape
    device = dones.device
    # dones_before[b, s] = number of dones at steps 0 .. s - 1, for s = 0 .. T
    dones_before = torch.cat([torch.zeros(B, 1, dtype=torch.long, device=device),
                              dones.long().cumsum(dim=1)], dim=1)
    t = torch.arange(T, device=device).view(T, 1)
    k = torch.arange(1, horizon + 1, device=device).view(1, horizon)
    end = t + k  # [T, K]: index of the target frame
    inside = end <= T
    end = end.clamp(max=T)
    crossed = dones_before[:, end] - dones_before[:, :T].unsqueeze(-1)  # dones at steps t .. t + k - 1
    return inside.unsqueeze(0) & valids.bool().unsqueeze(-1) & (crossed == 0)


def future_prediction_loss(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The future-prediction term: ``mean_{m in mask} mean_{c,h,w} (pred - target)^2``.

    Args:
        pred: ``[M, C, H, W]`` predicted frames ``o_{t+k}`` (one row per decoded (start, horizon)).
        target: ``[M, C, H, W]`` :func:`frame_targets` of the frames observed there.
        mask: ``[M]`` bool, :func:`future_mask` at each row's ``(b, t, k - 1)``.

    Returns:
        A scalar; ``0`` with a graph when nothing is masked in.
    """
    return masked_mean(per_sample_mse(pred, target), mask)


def sample_start_times(batch: int, length: int, num_starts: int, device: torch.device | str | None = None,
                       generator: torch.Generator | None = None) -> torch.Tensor:
    """``min(num_starts, length)`` distinct start times per trajectory, uniform over ``0 .. length - 1``.

    Uniform over all steps (not only those with a full horizon ahead) so every step is weighted
    alike; starts near the end lose their far horizons to :func:`future_mask` instead.

    Args:
        generator: drawn from this generator (on its own device; the result is then moved to
            ``device``) or, when ``None``, from the global RNG of ``device``.

    Returns:
        ``[batch, S]`` int64.
    """
    n = min(int(num_starts), int(length))
    return _distinct(batch, length, n, (), device, generator)


def sample_horizons(batch: int, num_starts: int, horizon: int, num_horizons: int,
                    device: torch.device | str | None = None,
                    generator: torch.Generator | None = None) -> torch.Tensor:
    """``min(num_horizons, horizon)`` distinct horizons per start, uniform over ``1 .. horizon``.

    Returns:
        ``[batch, num_starts, Hn]`` int64 in ``[1, horizon]`` (``generator`` as in
        :func:`sample_start_times`).
    """
    n = min(int(num_horizons), int(horizon))
    return _distinct(batch, horizon, n, (num_starts,), device, generator) + 1


def _distinct(batch: int, population: int, n: int, extra: tuple[int, ...], device, generator) -> torch.Tensor:
    """``[batch, *extra, n]``: ``n`` distinct values of ``0 .. population - 1`` per row (a random
    permutation's first ``n``)."""
    shape = (batch, *extra, population)
    if generator is None:
        keys = torch.rand(shape, device=device)
    else:
        keys = torch.rand(shape, device=generator.device, generator=generator)
    return keys.argsort(dim=-1)[..., :n].to(device)
