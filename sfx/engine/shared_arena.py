"""One shared-memory arena per run: every tensor, counter and queue the components share is a view into it.

A new process receives what it shares with the others as file descriptors, and the forkserver sends them
all in one message, of which Linux passes at most 253 (``SCM_MAX_FD``, a kernel constant). Were each
shared tensor and queue a file of its own, a child would receive one descriptor per tensor and queue of
every policy, worker and agent field (about 30 per policy: 8 policies failed to start). Carved from an
arena, everything a child inherits travels as one descriptor per arena chunk (one, unless the first
estimate was short), whatever the number of policies, workers, splits or fields.

- :class:`SharedArena` hands out tensors (:meth:`~SharedArena.tensor`), ctypes cells
  (:meth:`~SharedArena.value`) and ``faster_fifo`` queues (:meth:`~SharedArena.queue`) from chunks: files in
  ``/dev/shm``, unlinked at once (nothing is left behind by a crash or a kill), mapped in every process.
- A tensor carved from an arena pickles (for a new process, through ``multiprocessing``'s ForkingPickler)
  as its chunk, offset, dtype, shape and strides: one pickle holds each chunk once, so views of one chunk
  share its descriptor. Every other tensor pickles as torch makes it.
- Tensor memory is reserved at once (``posix_fallocate``: a full ``/dev/shm`` fails at start with one line,
  not with a bus error in a worker later); queue rings stay sparse until written, as ``multiprocessing``'s
  own shared arrays are (a spare queue that is never used costs no memory).
"""

from __future__ import annotations

import ctypes
import io
import math
import os
import tempfile
import weakref
from typing import Any, NamedTuple

import faster_fifo
import torch
import torch.multiprocessing  # registers torch's reducers first: ours wraps them
from multiprocessing import reduction

from sfx.errors import ConfigError

SCM_MAX_FD = 253        # descriptors Linux passes in one message (include/net/scm.h)
FORKSERVER_OWN_FDS = 3  # the forkserver adds its own to every child's message
ALIGN = 64              # bytes: a cache line, above any dtype's or pthread object's alignment
SHM_DIR = "/dev/shm"
MIN_CHUNK_BYTES = 16 * 2**20


class _Chunk:
    """One shared file, mapped. Pickles as (size, descriptor); rebuilt by mapping that descriptor."""

    def __init__(self, size: int, fd: int = -1) -> None:
        import mmap

        self.size = int(size)
        # where the file lives (a rebuilt chunk only maps what its creator made, and reserves nothing)
        self.directory = SHM_DIR if os.path.isdir(SHM_DIR) else tempfile.gettempdir()
        if fd < 0:
            fd, name = tempfile.mkstemp(prefix=f"sfx-arena-{os.getpid()}-", dir=self.directory)
            os.unlink(name)  # freed when the last process unmaps it, whatever kills the run
            os.ftruncate(fd, self.size)
        self.fd = fd
        self._finalizer = weakref.finalize(self, os.close, fd)
        self.buffer = mmap.mmap(fd, self.size)
        self.base_ptr = ctypes.addressof(ctypes.c_char.from_buffer(self.buffer))
        _CHUNKS[self.base_ptr] = self

    def __reduce__(self):
        return _rebuild_chunk, (self.size, reduction.DupFd(self.fd))

    def commit(self, offset: int, nbytes: int) -> None:
        """Reserve the pages of ``[offset, offset + nbytes)`` now (ConfigError when the file system is full)."""
        if nbytes <= 0 or not hasattr(os, "posix_fallocate"):
            return
        try:
            os.posix_fallocate(self.fd, offset, nbytes)
        except OSError as e:
            free = _free_bytes(self.directory)
            raise ConfigError(
                f"shared memory is full: {nbytes / 2**20:,.0f} MiB more could not be reserved in "
                f"{self.directory} ({free / 2**20:,.0f} MiB free; {e.strerror}). Give it more "
                f"(docker run --shm-size=..., or remount it larger) or use less: --num_envs_per_worker, "
                f"--num_workers, --rollout, --num_policies") from None


def _rebuild_chunk(size: int, dupfd: Any) -> _Chunk:
    return _Chunk(size, dupfd.detach())


def _free_bytes(directory: str) -> int:
    try:
        st = os.statvfs(directory)
        return st.f_bavail * st.f_frsize
    except OSError:
        return 0


# every live chunk of this process by the address it is mapped at: how a tensor finds its chunk
_CHUNKS: "weakref.WeakValueDictionary[int, _Chunk]" = weakref.WeakValueDictionary()


class Region(NamedTuple):
    """``nbytes`` bytes at ``offset`` of ``chunk``."""

    chunk: _Chunk
    offset: int
    nbytes: int


# --------------------------------------------------------------------------- tensors

def _tensor_view(region: Region, dtype: torch.dtype, shape: tuple, stride: tuple, storage_offset: int) -> torch.Tensor:
    itemsize = torch.empty(0, dtype=dtype).element_size()
    # the tensor's storage holds this exporter, which holds the chunk: the chunk (its descriptor, and its entry in
    # _CHUNKS that pickling looks up) lives exactly as long as some tensor of it does
    exporter = (ctypes.c_char * region.chunk.size).from_buffer(region.chunk.buffer)
    exporter.chunk = region.chunk
    flat = torch.frombuffer(exporter, dtype=dtype, count=region.nbytes // itemsize, offset=region.offset)
    return flat.as_strided(shape, stride, storage_offset)


def arena_region_of(t: torch.Tensor) -> Region | None:
    """The arena region under ``t``'s storage, or None for a tensor not carved from an arena."""
    if t.device.type != "cpu" or not _CHUNKS:
        return None
    storage = t.untyped_storage()
    ptr, nbytes = storage.data_ptr(), storage.nbytes()
    for base, chunk in list(_CHUNKS.items()):
        if base <= ptr and ptr + nbytes <= base + chunk.size:
            return Region(chunk, ptr - base, nbytes)
    return None


_torch_reduce_tensor = reduction.ForkingPickler._extra_reducers[torch.Tensor]


def _reduce_tensor(t: torch.Tensor):
    region = arena_region_of(t) if t.numel() else None
    if region is None:
        return _torch_reduce_tensor(t)
    return _tensor_view, (region, t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset())


reduction.ForkingPickler.register(torch.Tensor, _reduce_tensor)


# --------------------------------------------------------------------------- ctypes cells

class SharedValue:
    """A ctypes scalar in an arena with ``.value`` (as ``multiprocessing.RawValue``), picklable to children."""

    def __init__(self, region: Region, ctype: Any) -> None:
        self._region, self._ctype = region, ctype
        self._cell = ctype.from_buffer(region.chunk.buffer, region.offset)

    def __reduce__(self):
        return SharedValue, (self._region, self._ctype)

    @property
    def value(self) -> Any:
        return self._cell.value

    @value.setter
    def value(self, v: Any) -> None:
        self._cell.value = v


# --------------------------------------------------------------------------- queues

class ArenaQueue(faster_fifo.Queue):
    """A ``faster_fifo.Queue`` whose shared parts (its closed flag, its lock and condition variables, its
    message ring) live in an arena. faster_fifo's own constructor sizes them and builds the queue object
    in place: each shared array it assigns is replaced by an arena region of the same size, so nothing of
    it needs a descriptor of its own."""

    _SHARED = ("closed", "queue_obj_buffer", "shared_memory")

    def __init__(self, arena: "SharedArena", max_size_bytes: int) -> None:
        self.__dict__["_arena"] = arena
        self.__dict__["_regions"] = {}
        self.__dict__["_views"] = {}
        super().__init__(max_size_bytes=max_size_bytes)
        del self.__dict__["_arena"]  # the regions carry their chunks: a child needs nothing more

    def _place(self, name: str, shared: Any) -> None:
        # ``shared`` is what faster_fifo just allocated (a RawValue / RawArray of zeros, as fresh arena bytes are):
        # only its type and size are kept. faster_fifo builds its queue object afterwards, through this view.
        # (an array's type is made at run time and cannot be pickled: its element type and length can)
        kind = (shared._type_, shared._length_) if isinstance(shared, ctypes.Array) else (type(shared), 0)
        region = self.__dict__["_arena"].region(ctypes.sizeof(shared), commit=False)
        self.__dict__["_regions"][name] = (region, kind)
        self.__dict__["_views"][name] = _ctypes_view(region, kind)

    def _view(self, name: str) -> Any:
        views = self.__dict__["_views"]
        if name not in views:
            views[name] = _ctypes_view(*self.__dict__["_regions"][name])
        return views[name]

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_views"] = {}  # ctypes views of the mapping are made again in the process that unpickles
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)


def _ctypes_view(region: Region, kind: tuple) -> Any:
    element, length = kind
    ctype = element * length if length else element
    return ctype.from_buffer(region.chunk.buffer, region.offset)


def _shared_attribute(name: str) -> property:
    return property(lambda self: self._view(name), lambda self, shared: self._place(name, shared))


for _name in ArenaQueue._SHARED:
    setattr(ArenaQueue, _name, _shared_attribute(_name))


# --------------------------------------------------------------------------- the arena

class SharedArena:
    """Shared memory of one run, carved into tensors, cells and queues (see the module's docstring).

    ``capacity_bytes`` sizes the first chunk (an estimate: what does not fit goes to a new chunk, each at
    least twice the last, so a short estimate costs a descriptor or two, never one per allocation). Only
    tensor memory is reserved; queue rings are sparse.
    """

    def __init__(self, capacity_bytes: int = MIN_CHUNK_BYTES) -> None:
        self.chunks: list[_Chunk] = []
        self._next_chunk = max(MIN_CHUNK_BYTES, _round_up(int(capacity_bytes), 4096))
        self._used = 0

    def region(self, nbytes: int, commit: bool = True) -> Region:
        """``nbytes`` fresh bytes (zeros), reserved now when ``commit``."""
        nbytes = max(1, int(nbytes))
        start = _round_up(self._used, ALIGN)
        if not self.chunks or start + nbytes > self.chunks[-1].size:
            size = max(self._next_chunk, _round_up(nbytes, 4096))
            self.chunks.append(_Chunk(size))
            self._next_chunk = 2 * size
            start = 0
        chunk = self.chunks[-1]
        if commit:
            chunk.commit(start, nbytes)
        self._used = start + nbytes
        return Region(chunk, start, nbytes)

    def tensor(self, shape: tuple | list | int, dtype: torch.dtype = torch.float32, fill: Any = None) -> torch.Tensor:
        """A tensor of zeros (or ``fill``) in shared memory; a tensor with no elements is an ordinary one."""
        shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
        numel = math.prod(shape)
        if numel == 0:
            t = torch.zeros(shape, dtype=dtype)
        else:
            itemsize = torch.empty(0, dtype=dtype).element_size()
            region = self.region(numel * itemsize)
            t = _tensor_view(region, dtype, shape, _contiguous_strides(shape), 0)
        if fill is not None and fill != 0:
            t.fill_(fill)
        return t

    def value(self, ctype: Any, initial: Any = 0) -> SharedValue:
        """A shared ctypes scalar (``ctypes.c_int`` ...) with ``.value``."""
        cell = SharedValue(self.region(ctypes.sizeof(ctype)), ctype)
        cell.value = initial
        return cell

    def queue(self, max_size_bytes: int) -> ArenaQueue:
        """A ``faster_fifo`` queue in this arena (``max_size_bytes``: its message ring)."""
        return ArenaQueue(self, max_size_bytes)


def _round_up(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def _contiguous_strides(shape: tuple) -> tuple:
    strides, step = [], 1
    for s in reversed(shape):
        strides.append(step)
        step *= max(1, s)
    return tuple(reversed(strides))


class _DescriptorCounter:
    """Stands in for a starting process while pickling: counts what would be sent."""

    def __init__(self) -> None:
        self.fds: list[int] = []

    def duplicate_for_child(self, fd: int) -> int:
        self.fds.append(fd)
        return len(self.fds) - 1

    class DupFd:
        def __init__(self, index: int) -> None:
            self.index = index


def descriptors_passed(obj: Any) -> int:
    """How many file descriptors pickling ``obj`` for a new process (as ``multiprocessing`` does for the
    process's target and arguments) sends: the count the forkserver must fit in one message."""
    from multiprocessing.context import set_spawning_popen

    counter = _DescriptorCounter()
    set_spawning_popen(counter)
    try:
        reduction.dump(obj, io.BytesIO())
    finally:
        set_spawning_popen(None)
    return len(counter.fds)


def check_descriptors(name: str, count: int) -> None:
    """ConfigError (one line) when a process would receive more descriptors than Linux passes at once."""
    limit = SCM_MAX_FD - FORKSERVER_OWN_FDS
    if count > limit:
        raise ConfigError(
            f"{name} would receive {count} shared-memory and queue descriptors at start, but Linux passes at most "
            f"{limit} to a new process (SCM_MAX_FD = {SCM_MAX_FD}, a kernel constant): use fewer --num_policies, "
            f"--num_workers or --max_component_restarts")
