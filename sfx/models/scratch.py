"""Large per-step CPU tensors reused instead of allocated afresh.

glibc maps every allocation above its mmap threshold (32 MB at most) fresh and faults its pages in at first touch,
and PyTorch keeps no cache of CPU memory: the learner's float copy of a batch of 2048 doom frames (226 MB) took
98 ms into a fresh tensor against 17 ms into a reused one (2-core CPU, one thread), and that copy was 43% of the
learner's time in the pipeline-overhead bench. A :class:`Scratch` hands out the same memory again while nothing
else holds it: a caller gets a view of a held tensor, and the held tensor is handed out again only once no other
tensor shares its storage (the view, anything made from it, a tensor autograd saved for backward). Anything a
caller keeps therefore keeps its memory out of reuse, and a fresh tensor is allocated (and held) instead: no
caller can see its data overwritten.
"""

from __future__ import annotations

import math

import torch

__all__ = ["Scratch", "storage_is_shared"]

MIN_BYTES = 1 << 20  # below this, malloc's free lists reuse memory without page faults already
_use_count = getattr(torch._C, "_storage_Use_Count", None)  # no reuse where this PyTorch lacks it


def _count(t: torch.Tensor) -> int:
    return _use_count(t.untyped_storage()._cdata)


# the count of a tensor that nothing else holds: its own reference, plus the storage object asking makes (if this
# PyTorch's storage objects hold one), measured rather than assumed
_ALONE = _count(torch.empty(1)) if _use_count is not None else 0


def storage_is_shared(t: torch.Tensor) -> bool:
    """Whether a tensor other than ``t`` holds ``t``'s storage (True where PyTorch cannot tell)."""
    return _use_count is None or _count(t) > _ALONE


class Scratch:
    """Reused CPU tensors (see the module docstring). ``slots``: how many distinct tensors are held at most
    (the oldest is let go beyond that)."""

    def __init__(self, slots: int = 2) -> None:
        self.slots = slots
        self._held: list[torch.Tensor] = []

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str = "cpu",
              memory_format: torch.memory_format = torch.contiguous_format) -> torch.Tensor:
        """``torch.empty(shape, dtype=dtype, device=device, memory_format=memory_format)``, from held memory where
        one held tensor of that shape, dtype and layout is not shared (CPU tensors of at least ``MIN_BYTES``)."""
        shape = tuple(shape)
        if math.prod(shape) * dtype.itemsize < MIN_BYTES or _use_count is None or torch.device(device).type != "cpu":
            return torch.empty(shape, dtype=dtype, device=device, memory_format=memory_format)
        inference = torch.is_inference_mode_enabled()
        for held in self._held:
            if (held.shape == shape and held.dtype == dtype and held.is_contiguous(memory_format=memory_format)
                    and held.is_inference() == inference and not storage_is_shared(held)):
                return _view(held)
        held = torch.empty(shape, dtype=dtype, memory_format=memory_format)
        self._held.append(held)
        if len(self._held) > self.slots:
            self._held.pop(0)
        return _view(held)

    def __deepcopy__(self, memo: dict) -> "Scratch":
        return Scratch(self.slots)  # a copy of a model (a target network, say) holds memory of its own

    def __getstate__(self) -> dict:
        return {"slots": self.slots, "_held": []}  # a pickled model carries no scratch memory


def _view(t: torch.Tensor) -> torch.Tensor:
    # a tensor of its own over the held storage: while the caller (or autograd) keeps it, the storage counts as shared
    return t.as_strided(t.shape, t.stride())
