"""Slot rows gathered by the GPU straight from host memory (``--inference_gather=device``).

The trajectory slots live in shared host memory that every process maps. :class:`~sfx.engine.staging.HostStaging`
gathers an inference batch's rows on the CPU into a page-locked buffer and copies that to the device. Here the
slot tensors' memory is instead registered with CUDA in place (``cudaHostRegister``: page-locked and mapped into
the device's address space; with unified addressing, the default on 64-bit Linux, a registered host pointer is
also a device pointer), and seen from the device as CUDA tensors over the same bytes: ``index_select`` on such a
view is a kernel that reads the requested rows across the bus, so the policy worker's process does no gather
and no copy of its own. A rollout worker writes a row before it sends the request that names it, and the
kernel runs after the request arrives, so it reads what was written.

Registration is per process and per storage (the slot tensors are views of a few shared storages), pins those
pages for the process's life, and costs time once (about a second per few GB). Where registration fails
(no CUDA, a dtype the ``__cuda_array_interface__`` cannot name, the driver refusing) or the first gathered rows
differ from the CPU's own gather, :meth:`MappedSlots.create` returns ``None`` with the reason logged and the
caller keeps the host path.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

__all__ = ["MappedSlots", "cuda_view"]

log = logging.getLogger(__name__)

_REGISTER_PORTABLE, _REGISTER_MAPPED = 1, 2


def _clear_last_error() -> None:
    """Consume the CUDA runtime's last error after a failed call made outside PyTorch's checks (else PyTorch's
    next kernel launch would report it as its own): ``cudaGetLastError`` of the runtime library this process
    loaded, where it is a shared library (best effort)."""
    import ctypes

    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libcudart" in line}
        for path in paths:
            ctypes.CDLL(path).cudaGetLastError()
    except OSError:
        pass


class _CudaArray:
    """The ``__cuda_array_interface__`` (version 3) of device-addressable bytes: what ``torch.as_tensor`` reads
    to make a CUDA tensor over memory it does not own, without a copy."""

    def __init__(self, ptr: int, shape: tuple[int, ...], typestr: str, owner: Any) -> None:
        self.owner = owner  # the host tensor whose memory this is: kept alive as long as the view
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False), "version": 3,
                                         "strides": None, "stream": None}


def cuda_view(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A CUDA tensor over the bytes of ``host`` (contiguous, already registered with CUDA as mapped memory)."""
    if not host.is_contiguous():
        raise ValueError("cuda_view needs a contiguous host tensor")
    typestr = np.dtype(torch.empty(0, dtype=host.dtype).numpy().dtype).str  # TypeError for bfloat16 and the like
    with torch.cuda.device(device):
        return torch.as_tensor(_CudaArray(host.data_ptr(), tuple(host.shape), typestr, host), device=device)


class MappedSlots:
    """Flat ``[N * T, ...]`` CUDA views of slot tensors whose memory is registered with CUDA; :meth:`rows` gathers
    on the device. Build with :meth:`create`."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._views: dict[str, torch.Tensor] = {}
        self._registered: list[int] = []

    @classmethod
    def create(cls, device: torch.device, buffers: dict[str, torch.Tensor]) -> "MappedSlots | None":
        """Register the storages of ``buffers`` (name -> ``[N, T, ...]`` contiguous host tensor) and check one
        gather against the CPU's; ``None`` (logged) where any of it fails."""
        if device.type != "cuda" or not torch.cuda.is_available():
            return None
        mapped = cls(device)
        try:
            for name, buf in buffers.items():
                mapped._register(buf)
                mapped._views[name] = cuda_view(buf.view(-1, *buf.shape[2:]), device)
            mapped._check(buffers)
        except (RuntimeError, TypeError, ValueError, AttributeError) as e:
            log.warning("--inference_gather=device: %s; gathering on the host instead", e)
            mapped.close()
            return None
        return mapped

    def _register(self, buf: torch.Tensor) -> None:
        storage = buf.untyped_storage()
        ptr, nbytes = storage.data_ptr(), storage.nbytes()
        if ptr in self._registered or nbytes == 0:
            return
        rc = int(torch.cuda.cudart().cudaHostRegister(ptr, nbytes, _REGISTER_PORTABLE | _REGISTER_MAPPED))
        if rc != 0:
            _clear_last_error()
            raise RuntimeError(f"cudaHostRegister of {nbytes} bytes of slot memory failed with CUDA error {rc}")
        self._registered.append(ptr)

    def _check(self, buffers: dict[str, torch.Tensor]) -> None:
        for name, buf in buffers.items():
            flat = buf.view(-1, *buf.shape[2:])
            at = torch.tensor(sorted({0, len(flat) // 2, len(flat) - 1}), dtype=torch.long)
            if not torch.equal(self.rows(name, at).cpu(), flat[at]):
                raise RuntimeError(f"rows of {name!r} read on the device differ from the host's")

    def __contains__(self, name: str) -> bool:
        return name in self._views

    def rows(self, name: str, at: torch.Tensor) -> torch.Tensor:
        """Rows ``at`` (host or device indices into the flat ``[N * T, ...]`` view) of slot tensor ``name``, gathered
        on the device: a new device tensor, ordered on the current stream after what was queued before."""
        return torch.index_select(self._views[name], 0, at.to(self.device, non_blocking=True))

    def close(self) -> None:
        """Unregister the memory (the views must not be used after)."""
        self._views.clear()
        cudart = torch.cuda.cudart() if self._registered else None
        for ptr in self._registered:
            cudart.cudaHostUnregister(ptr)
        self._registered.clear()
