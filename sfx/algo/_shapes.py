"""Shape checks shared by the time-major target functions (vtrace, gae)."""

from __future__ import annotations

import torch


def check_time_major(fn: str, values: torch.Tensor, bootstrap_value: torch.Tensor, **same_as_values: torch.Tensor) -> None:
    """Raise one-line ``ValueError`` unless ``values`` is ``[T, B]``, every tensor in
    ``same_as_values`` has its shape and ``bootstrap_value`` is ``[B]``."""
    if values.dim() != 2:
        raise ValueError(f"{fn}: values must be [T, B], got shape {tuple(values.shape)}")
    for name, x in same_as_values.items():
        if x.shape != values.shape:
            raise ValueError(f"{fn}: {name} has shape {tuple(x.shape)}, expected {tuple(values.shape)} like values")
    if bootstrap_value.shape != values.shape[1:]:
        raise ValueError(
            f"{fn}: bootstrap_value has shape {tuple(bootstrap_value.shape)}, expected {tuple(values.shape[1:])}"
        )


def discounted_backward_scan(deltas: torch.Tensor, decay: torch.Tensor) -> torch.Tensor:
    """``x[t] = deltas[t] + decay[t] * x[t+1]`` with ``x[T] = 0``, over time-major ``[T, B]``.

    The recursion both GAE (decay = gamma * lambda, cut at episode ends) and V-trace
    (decay = gamma * c_t) reduce to.
    """
    out = torch.empty_like(deltas)
    acc = torch.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):
        acc = deltas[t] + decay[t] * acc
        out[t] = acc
    return out
