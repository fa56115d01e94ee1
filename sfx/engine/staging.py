"""Moving rows of the shared trajectory slots to the device that computes on them, and results back.

On a CUDA device a copy from pageable memory is staged by the driver through its own page-locked buffer,
synchronously; a copy from page-locked memory runs asynchronously on the stream. :class:`HostStaging`
gathers rows (``index_select`` on a flat view of a slot tensor, ~10x faster than two index tensors) into
page-locked buffers it keeps, ``depth`` per key, and copies them to the device without waiting; an entry is
reused only after the copy that read it has finished (a CUDA event). On the CPU it gathers into memory it
reuses once nothing holds it (:class:`~sfx.models.scratch.Scratch`) and copies nothing: the model reads the
rows where they are.

:func:`to_host` brings several device tensors back in one copy (their bytes packed into one buffer), since
every device->host copy synchronises and costs latency of its own.
"""

from __future__ import annotations

from typing import Any

import torch

from sfx.models.scratch import Scratch

__all__ = ["HostStaging", "gather_tree", "pack_bytes", "to_host", "tree_to_device", "unpack_bytes"]


class HostStaging:
    """Rows gathered on the host for ``device``.

    Args:
        device: where the rows go. Page-locked staging is used on CUDA only.
        depth: page-locked buffers per key, used in turn: with 2, a batch is gathered while the previous
            batch's copy may still be running (the learner, which overlaps); 1 where each batch's results
            come back (a synchronising copy) before the next gather (inference).
    """

    def __init__(self, device: torch.device, depth: int = 1) -> None:
        self.device = device
        self.pin = device.type == "cuda"
        self.depth = depth
        self._bufs: dict[str, list[torch.Tensor | None]] = {}
        self._events: dict[str, list[Any]] = {}
        self._turn: dict[str, int] = {}
        self._scratch: dict[str, Scratch] = {}

    def rows(self, key: str, buf: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        """Rows ``at`` of ``buf`` [N, T, ...] seen as [N * T, ...] (slot buffers are contiguous): [len(at), ...]
        on the host (page-locked on CUDA: pass it to :meth:`to_device` before gathering ``key`` again)."""
        return self.gather(key, buf.view(-1, *buf.shape[2:]), at)

    def gather(self, key: str, flat: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        """``flat.index_select(0, at)``, into this key's next page-locked buffer on CUDA, into reused memory on the
        CPU (:class:`~sfx.models.scratch.Scratch`: a learner's batch of frames is tens of MB, mostly page faults
        when fresh)."""
        if not self.pin:
            scratch = self._scratch.setdefault(key, Scratch())
            return torch.index_select(flat, 0, at, out=scratch.empty((len(at), *flat.shape[1:]), flat.dtype))
        n = len(at)
        bufs = self._bufs.setdefault(key, [None] * self.depth)
        events = self._events.setdefault(key, [None] * self.depth)
        i = self._turn.get(key, 0)
        if events[i] is not None:
            events[i].synchronize()  # the copy that last read this buffer has finished
            events[i] = None
        held = bufs[i]
        if held is None or held.shape[0] < n or held.dtype != flat.dtype or held.shape[1:] != flat.shape[1:]:
            # exactly the rows asked the first time (a learner's batch never changes), at least twice the old
            # size when it grows (inference batches vary, and page-locking memory is slow)
            grown = 2 * held.shape[0] if held is not None and held.shape[1:] == flat.shape[1:] else 0
            held = torch.empty((max(n, grown), *flat.shape[1:]), dtype=flat.dtype, pin_memory=True)
            bufs[i] = held
        return torch.index_select(flat, 0, at, out=held[:n])

    def to_device(self, key: str, rows: torch.Tensor) -> torch.Tensor:
        """``rows`` (from :meth:`rows` / :meth:`gather` with ``key``) on the device; on CUDA an asynchronous
        copy whose end is recorded, so the buffer is not overwritten before it is read."""
        if not self.pin:
            return rows.to(self.device)
        out = rows.to(self.device, non_blocking=True)
        i = self._turn.get(key, 0)
        event = torch.cuda.Event()
        event.record()
        self._events[key][i] = event
        self._turn[key] = (i + 1) % self.depth
        return out


def gather_tree(staging: HostStaging, tree: Any, at: torch.Tensor, prefix: str = "") -> Any:
    """:meth:`HostStaging.gather` of rows ``at`` of every tensor in a nested dict (keys joined into the
    staging keys)."""
    if isinstance(tree, dict):
        return {k: gather_tree(staging, v, at, f"{prefix}{k}/") for k, v in tree.items()}
    return staging.gather(prefix, tree, at)


def tree_to_device(staging: HostStaging, tree: Any, prefix: str = "") -> Any:
    """:meth:`HostStaging.to_device` of every tensor :func:`gather_tree` gathered (the same keys)."""
    if isinstance(tree, dict):
        return {k: tree_to_device(staging, v, f"{prefix}{k}/") for k, v in tree.items()}
    return staging.to_device(prefix, tree)


def to_host(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``tensors`` on the host. Several on a CUDA device come back in one copy: their bytes packed into one
    device buffer, copied once, and split on the host into views of their dtypes and shapes; host tensors
    are returned as they are."""
    if not tensors:
        return {}
    device = next(iter(tensors.values())).device
    if device.type == "cpu" or len(tensors) == 1:
        return {k: v.cpu() for k, v in tensors.items()}
    return unpack_bytes(pack_bytes(tensors).cpu(), tensors)


_ALIGN = 16  # every tensor's bytes start at a multiple of this: a view as any dtype needs its own alignment


def _padded(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN


def pack_bytes(tensors: dict[str, torch.Tensor]) -> torch.Tensor:
    """The bytes of every tensor, one after the other (each starting at a multiple of 16), as one uint8
    tensor on their device."""
    parts = []
    for t in tensors.values():
        raw = t.contiguous().view(-1).view(torch.uint8)
        parts.append(raw)
        pad = _padded(raw.numel()) - raw.numel()
        if pad:
            parts.append(raw.new_zeros(pad))
    return torch.cat(parts)


def unpack_bytes(packed: torch.Tensor, like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Inverse of :func:`pack_bytes`: views of ``packed`` with ``like``'s dtypes and shapes."""
    out, at = {}, 0
    for k, t in like.items():
        size = t.numel() * t.element_size()
        out[k] = packed[at:at + size].view(t.dtype).view(t.shape)
        at += _padded(size)
    return out
