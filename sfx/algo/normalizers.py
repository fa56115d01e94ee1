"""Running mean / variance normalisation for observations and returns."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["RunningMeanStd"]


class RunningMeanStd(nn.Module):
    """Running per-element mean and (population) variance of a stream of batches.

    Batches are merged with the parallel-variance formula of Chan, Golub and LeVeque (1979),
    "Updating formulae and a pairwise algorithm for computing sample variances": for a running
    ``(mean_a, var_a, n_a)`` and a batch ``(mean_b, var_b, n_b)``, with ``delta = mean_b - mean_a``
    and ``n = n_a + n_b``,

        mean = mean_a + delta * n_b / n
        M2   = var_a * n_a + var_b * n_b + delta^2 * n_a * n_b / n
        var  = M2 / n

    so the result equals the mean and variance of everything seen so far, whatever the batching.
    Statistics are kept in float64 (they sum millions of samples) as buffers, so they travel in
    ``state_dict`` and follow ``.to(device)``.

    Args:
        shape: shape of one sample (``()`` or ``[]`` for scalars).
        eps: added to the variance before the square root in (de)normalisation.
        clip: normalised values are clamped to ``[-clip, clip]``; ``None`` or ``<= 0`` = no clip.
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: int | tuple[int, ...] | list[int] | torch.Size = (), eps: float = 1e-5,
                 clip: float | None = 5.0) -> None:
        super().__init__()
        self.shape = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
        self.eps = float(eps)
        self.clip = clip if clip is not None and clip > 0 else None
        self.register_buffer("mean", torch.zeros(self.shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(self.shape, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Fold a batch ``x [N, *shape]`` into the statistics."""
        batch = x.detach().reshape(-1, *self.shape).to(device=self.mean.device, dtype=torch.float64)
        n_b = batch.shape[0]
        if n_b == 0:
            return
        mean_b = batch.mean(dim=0)
        var_b = batch.var(dim=0, unbiased=False)
        n_a = self.count
        n = n_a + n_b
        delta = mean_b - self.mean
        m2 = self.var * n_a + var_b * n_b + delta**2 * n_a * n_b / n
        self.mean.add_(delta * n_b / n)
        self.var.copy_(m2 / n)
        self.count.copy_(n)

    def _std(self, dtype: torch.dtype) -> torch.Tensor:
        return torch.sqrt(self.var + self.eps).to(dtype)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """``clamp((x - mean) / sqrt(var + eps), -clip, clip)``, in ``x``'s float dtype."""
        dtype = x.dtype if x.is_floating_point() else torch.float32
        y = (x.to(dtype) - self.mean.to(dtype)) / self._std(dtype)
        if self.clip is not None:
            y = torch.clamp(y, -self.clip, self.clip)
        return y

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        """``x * sqrt(var + eps) + mean`` (no clipping): the inverse of ``normalize``."""
        return x * self._std(x.dtype) + self.mean.to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.normalize(x)

    def extra_repr(self) -> str:
        return f"shape={self.shape}, eps={self.eps}, clip={self.clip}"
