"""Running mean / variance normalisation for observations and returns."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["RunningMeanStd"]

_SMALL_SAMPLE = 4096          # values per sample up to which moments are computed in float64 at once
_CHUNK_ELEMENTS = 1 << 22     # values per float32 chunk for larger samples (16 MB)


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
        shift: subtracted from the values before ``scale`` divides them in ``update`` and ``normalize``
            (``--obs_subtract_mean``): the statistics are those of ``(x - shift) / scale``.
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: int | tuple[int, ...] | list[int] | torch.Size = (), eps: float = 1e-5,
                 clip: float | None = 5.0, shift: float = 0.0) -> None:
        super().__init__()
        self.shape = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
        self.eps = float(eps)
        self.shift = float(shift)
        self.clip = clip if clip is not None and clip > 0 else None
        self.register_buffer("mean", torch.zeros(self.shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(self.shape, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self._affine_cache: tuple | None = None  # (key, a, b) of normalize()

    @torch.no_grad()
    def update(self, x: torch.Tensor, scale: float = 1.0, reduce=None) -> None:
        """Fold a batch ``x [N, *shape]``, as ``(x - shift) / scale``, into the statistics (applied to the
        moments, so raw uint8 frames need no float copy).

        ``reduce`` (data-parallel ranks): a sum over ranks; the batch is then all ranks' rows together
        (count, sum and sum of squares in float64), so every rank's statistics stay identical."""
        batch = x.detach().reshape(-1, *self.shape).to(device=self.mean.device)
        if reduce is not None:
            b = batch.to(torch.float64)
            count = reduce(b.new_tensor([float(b.shape[0])]))[0]
            if count == 0:
                return
            sums = reduce(torch.stack([b.sum(dim=0), (b * b).sum(dim=0)]))
            n_b = float(count)
            mean_b = sums[0] / count
            var_b = (sums[1] / count - mean_b * mean_b).clamp(min=0.0)
        else:
            n_b = batch.shape[0]
            if n_b == 0:
                return
            mean_b, var_b = self._batch_moments(batch)
        mean_b = mean_b - self.shift
        if scale != 1.0:
            mean_b, var_b = mean_b / scale, var_b / (scale * scale)
        n_a = self.count
        n = n_a + n_b
        delta = mean_b - self.mean
        m2 = self.var * n_a + var_b * n_b + delta**2 * n_a * n_b / n
        self.mean.add_(delta * n_b / n)
        self.var.copy_(m2 / n)
        self.count.copy_(n)

    @staticmethod
    def _batch_moments(batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and population variance over dim 0, as float64. Small samples are summed in float64;
        a large one (a batch of image frames: thousands of rows of tens of thousands of values) in
        float32 chunks of rows, two passes, so no float64 copy of the whole batch is ever made."""
        n = batch.shape[0]
        if batch[0].numel() <= _SMALL_SAMPLE:
            b = batch.to(torch.float64)
            return b.mean(dim=0), b.var(dim=0, unbiased=False)
        rows = max(1, _CHUNK_ELEMENTS // batch[0].numel())
        total = torch.zeros(batch.shape[1:], dtype=torch.float64, device=batch.device)
        for chunk in torch.split(batch, rows):
            total += chunk.float().sum(dim=0)
        mean = total / n
        mean32 = mean.float()
        sq = torch.zeros_like(total)
        for chunk in torch.split(batch, rows):
            sq += (chunk.float() - mean32).square_().sum(dim=0)
        return mean, sq / n

    def _std(self, dtype: torch.dtype) -> torch.Tensor:
        return torch.sqrt(self.var + self.eps).to(dtype)

    def normalize(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        """``clamp(((x - shift) / scale - mean) / sqrt(var + eps), -clip, clip)``, in ``x``'s float dtype (float32
        for integer ``x``, e.g. uint8 frames, which need no float copy of their own).

        Computed as one fused ``x * a + b`` with per-element factors cached until the statistics
        change; for a channels_last batch of images the factors are laid out channels_last too, so
        the pass runs over contiguous memory."""
        dtype = x.dtype if x.is_floating_point() else torch.float32
        a, b = self._affine(x, dtype, float(scale))
        if a.dim() == 4:
            # channels_last [N, C, H, W] is NHWC in memory: run the pass on [N, H*W*C] views, so the
            # factors broadcast over rows only and the inner loop vectorises
            n, c, h, w = x.shape
            rows = x.permute(0, 2, 3, 1).reshape(n, -1).to(dtype)
            y = torch.addcmul(b.permute(0, 2, 3, 1).reshape(1, -1), rows, a.permute(0, 2, 3, 1).reshape(1, -1))
            y = y.view(n, h, w, c).permute(0, 3, 1, 2)
        else:
            y = torch.addcmul(b, x.to(dtype), a)
        if self.clip is not None:
            y.clamp_(-self.clip, self.clip)
        return y

    def _affine(self, x: torch.Tensor, dtype: torch.dtype, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        channels_last = (len(self.shape) == 3 and x.dim() == 4 and not x.is_contiguous()
                         and x.is_contiguous(memory_format=torch.channels_last))
        # in-place updates (update(), load_state_dict, a policy worker reading published weights) bump
        # a tensor's _version; .to(device) makes new tensors: either way the key changes
        key = (self.mean.data_ptr(), self.mean._version, self.var.data_ptr(), self.var._version,
               dtype, x.device, scale, channels_last)
        # while a CUDA graph captures (sfx.engine.cuda_graphs) the factors are computed, not read from the cache:
        # a replay must recompute them from the statistics as they are then, not reuse the capture's
        capturing = x.is_cuda and torch.cuda.is_current_stream_capturing()
        if capturing or self._affine_cache is None or self._affine_cache[0] != key:
            inv_std = 1.0 / torch.sqrt(self.var + self.eps)  # float64 until the final cast
            a = (inv_std / scale).to(device=x.device, dtype=dtype)
            b = (-(self.mean + self.shift / scale) * inv_std).to(device=x.device, dtype=dtype)
            if channels_last:
                a = a.unsqueeze(0).contiguous(memory_format=torch.channels_last)
                b = b.unsqueeze(0).contiguous(memory_format=torch.channels_last)
            if capturing:
                return a, b
            self._affine_cache = (key, a, b)
        return self._affine_cache[1], self._affine_cache[2]

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        """``x * sqrt(var + eps) + mean`` (no clipping): the inverse of ``normalize``."""
        return x * self._std(x.dtype) + self.mean.to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.normalize(x)

    def extra_repr(self) -> str:
        return f"shape={self.shape}, eps={self.eps}, clip={self.clip}"
