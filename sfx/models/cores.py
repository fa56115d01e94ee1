"""Recurrent cores behind one interface, and the registry ``--rnn_type`` names them from.

The engine keeps one recurrent state per agent as a flat float32 row ``[S]`` in shared memory,
whatever the core; it stores, resets and passes that row only through what the core declares
(the :class:`Core` interface below), so a new core (e.g. a Transformer-XL whose state is a memory
of past hidden states, flattened) plugs in with ``register_core`` and no engine change. Layouts of
the built-ins:

* identity (no RNN, ``--use_rnn=False``): ``S = 0`` (the engine stores one dummy column, passed
  through unchanged);
* GRU: ``S = layers * hidden``, row = ``h`` of layer 0, layer 1, ...;
* LSTM: ``S = 2 * layers * hidden``, row = all layers' ``h``, then all layers' ``c``;
* Transformer-XL (``sfx.models.trxl``): ``S = 2`` (``[valid, pos]``) plus a per-agent memory (below).

A core may also declare a **memory** (:class:`MemoryCore`): ``memory_len`` entries of
``memory_width`` floats per agent, e.g. a Transformer-XL's hidden states at the agent's past steps,
far too large to store at every step of a trajectory. The engine keeps one memory per agent in
shared memory, hands it to ``forward_step`` and writes the step's new entry back where the core
says; a trajectory slot stores only the memory as it was before the slot's first step, which the
learner's ``forward_sequence`` receives. The small state row still carries what an episode start
resets (for Transformer-XL: how many entries belong to the episode), so resets work as for any core.

Callers (``sfx.models.trunk.Trunk``) use one signature for every core, memory or not:
``step(x, states, memory=None) -> CoreStep(out, states, memory_entry)`` and
``unroll(x, states, resets, memory=None) -> out``, which :class:`Core` and :class:`MemoryCore` implement
once over the methods a core writes (``forward_step`` / ``forward_sequence``, with or without ``memory``).
``make_core`` hands out only :class:`Core` instances: a registered core that does not subclass it is
wrapped (:class:`ForeignCore`), its state-dict keys unchanged.

Both built-in RNNs start episodes from zeros. ``forward_sequence`` must give exactly what stepping one
observation at a time gives, with the state replaced by ``initial_state`` before every step whose
``resets`` flag is set. For GRU/LSTM, without resets after the first step it is one cuDNN-style
call over the whole sequence. With resets inside, each row is cut into segments at its resets and
all segments run as one packed sequence (one call, no loop over time, no padding): a segment
starting at a reset starts from the initial state, a row's first segment from the row's state.
"""

from __future__ import annotations

from numbers import Integral
from typing import Any, Callable, NamedTuple

import torch
import torch.nn as nn
from torch.nn.utils.rnn import PackedSequence

from sfx.errors import ConfigError
from sfx.cfg.core_names import add_core_name, check_rnn_type, core_names, remove_core_name

RNN_TYPES = ("gru", "lstm")  # the torch.nn recurrent cores RnnCore wraps


class CoreStep(NamedTuple):
    """One step of a core for ``B`` agents (:meth:`Core.step`)."""

    out: torch.Tensor                  # [B, out_size]
    states: torch.Tensor               # [B, S] the state after the step
    memory_entry: torch.Tensor | None  # [B, memory_width] to write at memory_index(states before); None: no memory


class Core(nn.Module):
    """What every core (built-in or registered) gives the actor-critic and the engine.

    Attributes:
        out_size: width of the features the core outputs (> 0).
        state_size: ``S``, floats per agent in the flat state row (0 = stateless: the engine then
            passes one dummy column, which the core must give back unchanged).

    Methods (shapes: ``B`` agents or sequences, ``T`` steps, ``F`` input features):

    * ``initial_state(batch_size, device) -> [B, S]``: the state an episode starts from (zeros
      here; override for a learned or non-zero start). Resets go through it, never through zeroing.
    * ``forward_step(x [B, F], states [B, S]) -> (out [B, out_size], new_states [B, S])``.
    * ``forward_sequence(x [B, T, F], states [B, S], resets [B, T] bool) -> out [B, T, out_size]``:
      ``states`` is the state before step 0; a reset at ``t`` means the state before step ``t`` is
      ``initial_state``. Must equal ``T`` calls of ``forward_step`` with those resets; the default
      here is that loop, so a core needs only ``forward_step`` to be correct and overrides
      ``forward_sequence`` to be fast.

    Callers use :meth:`step` and :meth:`unroll` (the same for a :class:`MemoryCore`), not the two above.
    """

    out_size: int
    state_size: int
    memory_len: int = 0    # entries of per-agent memory (0: none; see MemoryCore)
    memory_width: int = 0  # floats per memory entry

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> torch.Tensor:
        """``[batch_size, state_size]`` float32 state of an agent at an episode start (zeros)."""
        return torch.zeros(batch_size, self.state_size, device=device)

    def reset_states(self, states: torch.Tensor, resets: torch.Tensor) -> torch.Tensor:
        """``states [B, S]`` with the rows where ``resets [B]`` is set replaced by ``initial_state``."""
        if self.state_size == 0:
            return states
        init = self.initial_state(states.shape[0], states.device).to(states.dtype)
        return torch.where(resets.bool().unsqueeze(1), init, states)

    def forward_step(self, x: torch.Tensor, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [B, F]``, ``states [B, S]`` -> ``(out [B, out_size], new_states [B, S])``."""
        raise NotImplementedError

    def forward_sequence(self, x: torch.Tensor, states: torch.Tensor, resets: torch.Tensor) -> torch.Tensor:
        """``x [B, T, F]``, ``states [B, S]`` (before step 0), ``resets [B, T]`` -> ``out [B, T, out_size]``
        (reference implementation: one ``forward_step`` per step)."""
        outs = []
        for t in range(x.shape[1]):
            states = self.reset_states(states, resets[:, t])
            out, states = self.forward_step(x[:, t], states)
            outs.append(out)
        return torch.stack(outs, dim=1)

    def step(self, x: torch.Tensor, states: torch.Tensor, memory: torch.Tensor | None = None) -> CoreStep:
        """The one step signature of every core: ``x [B, F]``, ``states [B, S]``, ``memory [B, M, W]`` (a core
        with a memory only; else None) -> :class:`CoreStep` (``memory_entry`` None without a memory)."""
        out, new_states = self.forward_step(x, states)
        return CoreStep(out, new_states, None)

    def unroll(self, x: torch.Tensor, states: torch.Tensor, resets: torch.Tensor,
               memory: torch.Tensor | None = None) -> torch.Tensor:
        """The one sequence signature of every core: ``x [B, T, F]``, ``states [B, S]`` (and ``memory``) as before
        step 0, ``resets [B, T]`` -> ``out [B, T, out_size]``."""
        return self.forward_sequence(x, states, resets)


class MemoryCore(Core):
    """A core with a per-agent memory besides its state row (``memory_len > 0``, ``memory_width > 0``).

    The engine's side: a memory ``[memory_len, memory_width]`` float32 per agent, never reset (the
    state row says which entries belong to the current episode), written only at
    ``memory_index(states)`` with the ``entry`` of each acting step. The core's side:

    * ``memory_index(states [B, S]) -> [B]`` long: where the entry of a step taken from ``states`` goes
      (a function of the state before the step, so doing a step twice writes the same row twice);
    * ``forward_step(x [B, F], states [B, S], memory [B, M, W]) -> (out, new_states, entry [B, W])``;
    * ``forward_sequence(x [B, T, F], states [B, S], resets [B, T], memory [B, M, W]) -> out [B, T, out]``
      with ``states`` and ``memory`` as before step 0; must equal ``T`` calls of ``forward_step``, each
      one's entry written into the memory before the next (the default here is that loop).
    """

    def memory_index(self, states: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward_step(self, x: torch.Tensor, states: torch.Tensor,  # type: ignore[override]
                     memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def forward_sequence(self, x: torch.Tensor, states: torch.Tensor, resets: torch.Tensor,  # type: ignore[override]
                         memory: torch.Tensor) -> torch.Tensor:
        """Reference implementation: one ``forward_step`` per step, writing each entry into a copy of the memory."""
        memory = memory.clone()
        rows = torch.arange(x.shape[0], device=x.device)
        outs = []
        for t in range(x.shape[1]):
            states = self.reset_states(states, resets[:, t])
            index = self.memory_index(states)
            out, states, entry = self.forward_step(x[:, t], states, memory)
            memory = memory.index_put((rows, index), entry.to(memory.dtype))
            outs.append(out)
        return torch.stack(outs, dim=1)

    def step(self, x: torch.Tensor, states: torch.Tensor, memory: torch.Tensor | None = None) -> CoreStep:
        """:meth:`Core.step` with the memory this core needs (``[B, memory_len, memory_width]``)."""
        return CoreStep(*self.forward_step(x, states, _needed(memory, self)))

    def unroll(self, x: torch.Tensor, states: torch.Tensor, resets: torch.Tensor,
               memory: torch.Tensor | None = None) -> torch.Tensor:
        """:meth:`Core.unroll` with the memory before step 0 (``[B, memory_len, memory_width]``)."""
        return self.forward_sequence(x, states, resets, _needed(memory, self))


def _needed(memory: torch.Tensor | None, core: nn.Module) -> torch.Tensor:
    if memory is None:
        raise ValueError(f"{type(core).__name__} keeps a per-agent memory: pass memory [B, {core.memory_len}, "
                         f"{core.memory_width}]")
    return memory


class ForeignCore(Core):
    """A registered core that does not subclass :class:`Core` (the duck-typed interface ``register_core``
    accepts), or declares a memory without subclassing :class:`MemoryCore`: it gets :meth:`Core.step` and
    :meth:`Core.unroll`, calling its ``forward_step`` / ``forward_sequence`` with a memory exactly when its
    ``memory_len`` is > 0 (how the actor-critic called every core before cores had one signature).

    Transparent: its state-dict keys are the wrapped module's own (checkpoints read and write the same
    names; only ``named_parameters`` shows the ``inner.`` level), other attributes are looked up on it,
    and ``forward_step`` / ``forward_sequence`` / ``initial_state`` / ``memory_index`` are its.

    Attributes:
        inner: the wrapped module.
    """

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner
        self.out_size, self.state_size = int(inner.out_size), int(inner.state_size)
        self.memory_len = int(getattr(inner, "memory_len", 0))
        self.memory_width = int(getattr(inner, "memory_width", 0))
        self.register_state_dict_post_hook(_drop_inner_prefix)
        self.register_load_state_dict_pre_hook(_add_inner_prefix)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "_modules" or "inner" not in self.__dict__.get("_modules", {}):
                raise
            return getattr(self._modules["inner"], name)

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> torch.Tensor:
        return self.inner.initial_state(batch_size, device)

    def memory_index(self, states: torch.Tensor) -> torch.Tensor:
        return self.inner.memory_index(states)

    def forward_step(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.inner.forward_step(*args)

    def forward_sequence(self, *args: torch.Tensor) -> torch.Tensor:
        return self.inner.forward_sequence(*args)

    def step(self, x: torch.Tensor, states: torch.Tensor, memory: torch.Tensor | None = None) -> CoreStep:
        if self.memory_len:
            return MemoryCore.step(self, x, states, memory)  # type: ignore[arg-type]
        return super().step(x, states, memory)

    def unroll(self, x: torch.Tensor, states: torch.Tensor, resets: torch.Tensor,
               memory: torch.Tensor | None = None) -> torch.Tensor:
        if self.memory_len:
            return MemoryCore.unroll(self, x, states, resets, memory)  # type: ignore[arg-type]
        return super().unroll(x, states, resets, memory)


def _drop_inner_prefix(module: nn.Module, state_dict: dict, prefix: str, local_metadata: Any) -> None:
    # the entries are the last written so far: popping and re-adding them keeps the state dict's order
    for key in [k for k in state_dict if k.startswith(prefix + "inner.")]:
        state_dict[prefix + key[len(prefix) + len("inner."):]] = state_dict.pop(key)


def _add_inner_prefix(module: nn.Module, state_dict: dict, prefix: str, *args: Any) -> None:
    for key in [k for k in state_dict if k.startswith(prefix) and not k.startswith(prefix + "inner.")]:
        state_dict[prefix + "inner." + key[len(prefix):]] = state_dict.pop(key)


class IdentityCore(Core):
    """No memory: features pass through; states pass through untouched."""

    def __init__(self, input_size: int):
        super().__init__()
        self.out_size = input_size
        self.state_size = 0

    def forward_step(self, x: torch.Tensor, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [B, F]``, ``states [B, S]`` -> ``(x, states)``."""
        return x, states

    def forward_sequence(self, x: torch.Tensor, states: torch.Tensor, resets: torch.Tensor) -> torch.Tensor:
        """``x [B, T, F]`` -> ``[B, T, F]``."""
        return x


class RnnCore(Core):
    """``torch.nn.GRU`` / ``torch.nn.LSTM`` (``num_layers`` deep) behind the flat-state interface.

    Starts from zeros; a subclass may override ``initial_state`` (both sequence paths use it)."""

    def __init__(self, input_size: int, hidden_size: int, rnn_type: str = "gru", num_layers: int = 1):
        super().__init__()
        if rnn_type not in RNN_TYPES:
            raise ConfigError(f"RnnCore rnn_type {rnn_type!r} is not known; allowed: {', '.join(RNN_TYPES)}")
        if not isinstance(num_layers, int) or num_layers < 1:
            raise ConfigError(f"rnn_num_layers {num_layers!r} is not valid; allowed: an integer >= 1")
        self.is_lstm = rnn_type == "lstm"
        rnn_cls = nn.LSTM if self.is_lstm else nn.GRU
        self.rnn = rnn_cls(input_size, hidden_size, num_layers=num_layers, batch_first=True)
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.out_size = hidden_size
        self.state_size = (2 if self.is_lstm else 1) * num_layers * hidden_size

    # flat [B, S] <-> torch's [layers, B, H] (a tuple (h, c) for LSTM)
    def unflatten(self, states: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        b = states.shape[0]
        parts = 2 if self.is_lstm else 1
        hs = states.reshape(b, parts, self.num_layers, self.hidden_size).permute(1, 2, 0, 3).contiguous()
        return (hs[0], hs[1]) if self.is_lstm else hs[0]

    def flatten(self, hidden: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        hs = torch.stack(hidden) if self.is_lstm else hidden.unsqueeze(0)  # [parts, L, B, H]
        return hs.permute(2, 0, 1, 3).reshape(hs.shape[2], -1)

    def forward_step(self, x: torch.Tensor, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step. ``x [B, F]``, ``states [B, S]`` -> ``(out [B, H], new_states [B, S])``."""
        out, hidden = self.rnn(x.unsqueeze(1), self.unflatten(states))
        return out.squeeze(1), self.flatten(hidden)

    def forward_sequence(self, x: torch.Tensor, states: torch.Tensor, resets: torch.Tensor) -> torch.Tensor:
        """``x [B, T, F]``, ``states [B, S]`` (before step 0), ``resets [B, T]`` bool (the state
        before that step is ``initial_state``) -> ``out [B, T, H]``."""
        resets = resets.bool()
        states = self.reset_states(states, resets[:, 0])
        if x.shape[1] == 1 or not bool(resets[:, 1:].any()):
            out, _ = self.rnn(x, self.unflatten(states))
            return out
        return self._packed_segments(x, states, resets)

    def _packed_segments(self, x: torch.Tensor, states: torch.Tensor, resets: torch.Tensor) -> torch.Tensor:
        B, T, F = x.shape
        n = B * T
        dev = x.device
        starts = resets.clone()
        starts[:, 0] = True  # every row opens a segment at t = 0
        starts = starts.reshape(n)
        # segments never cross rows, so in row-major order each one is a contiguous run
        seg_start = starts.nonzero().squeeze(1)                      # [N] flat index of each first step
        seg_id = starts.long().cumsum(0) - 1                          # [n] segment of each step
        pos = torch.arange(n, device=dev) - seg_start[seg_id]         # [n] step within its segment
        lengths = torch.diff(seg_start, append=seg_start.new_tensor([n]))  # [N]
        num_seg = seg_start.numel()

        # A PackedSequence holds segments sorted longest first, time-major: the entries of step p
        # are the batch_sizes[p] segments longer than p, in rank order, starting at offsets[p].
        order = torch.argsort(lengths, descending=True, stable=True)  # rank -> segment
        rank = torch.empty_like(order)
        rank[order] = torch.arange(num_seg, device=dev)
        max_len = int(lengths.max())
        count_by_len = torch.bincount(lengths, minlength=max_len + 1)  # [max_len + 1]
        batch_sizes = count_by_len.flip(0).cumsum(0).flip(0)[1:]      # [max_len]: #segments with length > p
        offsets = batch_sizes.cumsum(0) - batch_sizes
        packed_idx = offsets[pos] + rank[seg_id]                      # [n] where each step sits

        data = x.new_empty(n, F)
        data[packed_idx] = x.reshape(n, F)
        packed = PackedSequence(data, batch_sizes.cpu())

        # a row's first segment continues the row's state (already the initial state if reset at
        # t = 0); a segment opened by a reset starts from the initial state
        row = seg_start // T
        first = (seg_start % T == 0).unsqueeze(1)
        init = self.initial_state(B, dev).to(states.dtype)
        seg_states = torch.where(first, states[row], init[row])[order]
        out, _ = self.rnn(packed, self.unflatten(seg_states))
        return out.data[packed_idx].reshape(B, T, self.hidden_size)


CoreFactory = Callable[[Any, int], nn.Module]  # returns a Core (or a module with its interface)

_core_factories: dict[str, CoreFactory] = {}


def register_core(name: str, factory: CoreFactory) -> None:
    """Make ``--rnn_type=name`` (with ``--use_rnn``) build ``factory(cfg, input_size)``.

    The factory returns a core: an ``nn.Module`` with the :class:`Core` interface (subclassing
    ``Core`` gives ``initial_state``, a reference ``forward_sequence`` and the callers' ``step`` /
    ``unroll``; a module that does not subclass it is wrapped in :class:`ForeignCore`), an integer
    ``out_size > 0`` and ``state_size >= 0``. ``input_size`` is the encoder's ``out_size`` (plus the
    previous action and reward with ``--use_prev_action_reward``).
    Registering a name again replaces the earlier factory (a built-in name too). Worker processes
    need the registration as well: do it at import time of a module they import (e.g. one named in
    ``SFX_EXTRA_ENV_MODULES``), as for custom envs and encoders.
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"core name {name!r} is not valid; allowed: a non-empty string")
    if not callable(factory):
        raise ConfigError(f"core factory for {name!r} is {factory!r}; allowed: a callable(cfg, input_size)")
    _core_factories[name] = factory
    add_core_name(name)


def unregister_core(name: str) -> None:
    """Forget a custom core (tests use it to leave the registry as they found it); a built-in
    name gets its built-in factory back."""
    if name in _BUILTIN_FACTORIES:
        _core_factories[name] = _BUILTIN_FACTORIES[name]
        return
    _core_factories.pop(name, None)
    remove_core_name(name)


def registered_cores() -> list[str]:
    """Every name ``--rnn_type`` accepts: the built-ins, then the custom cores."""
    return list(core_names())


def _rnn_factory(rnn_type: str) -> CoreFactory:
    def factory(cfg: Any, input_size: int) -> RnnCore:
        return RnnCore(input_size, cfg.hidden_size, rnn_type, cfg.rnn_num_layers)
    factory.__name__ = f"{rnn_type}_core"
    return factory


def register_builtin_core(name: str, factory: CoreFactory) -> None:
    """A built-in core (``unregister_core`` brings its factory back). Transformer-XL registers itself from
    its own module (:mod:`sfx.models.trxl`, imported by the package), which builds on this one."""
    _BUILTIN_FACTORIES[name] = factory
    register_core(name, factory)


_BUILTIN_FACTORIES: dict[str, CoreFactory] = {}
for _name in ("gru", "lstm"):
    register_builtin_core(_name, _rnn_factory(_name))


def _check_core(core: Any, name: str) -> None:
    out_size, state_size = getattr(core, "out_size", None), getattr(core, "state_size", None)
    memory_len, memory_width = getattr(core, "memory_len", 0), getattr(core, "memory_width", 0)
    needs = ("initial_state", "forward_step", "forward_sequence") + (("memory_index",) if memory_len else ())
    missing = [m for m in needs if not callable(getattr(core, m, None))]
    bad_memory = (not isinstance(memory_len, Integral) or not isinstance(memory_width, Integral) or memory_len < 0
                  or memory_width < 0 or (memory_len > 0) != (memory_width > 0))
    if (not isinstance(core, nn.Module) or missing or not isinstance(out_size, Integral) or out_size <= 0
            or not isinstance(state_size, Integral) or state_size < 0 or bad_memory):
        raise ConfigError(f"core {name!r} built {type(core).__name__} (out_size {out_size!r}, state_size "
                          f"{state_size!r}, memory {memory_len!r} x {memory_width!r}, missing {missing or 'nothing'}); "
                          f"allowed: an nn.Module with the sfx.models.Core interface, integer out_size > 0 and "
                          f"state_size >= 0, and memory_len, memory_width both 0 or both > 0 (then with "
                          f"memory_index, see sfx.models.MemoryCore)")


def make_core(cfg: Any, input_size: int) -> Core:
    """Identity when ``cfg.use_rnn`` is False, else the core registered as ``cfg.rnn_type``
    (built-ins: a GRU/LSTM of ``cfg.hidden_size``, ``cfg.rnn_num_layers`` deep). Always a :class:`Core`
    (a registered module that does not subclass it, or a ``Core`` with a memory that is not a ``MemoryCore``,
    comes wrapped in :class:`ForeignCore`).

    Raises:
        ConfigError: ``rnn_type`` names no registered core (the message lists the allowed names),
            or the factory built something without the core interface.
    """
    if not cfg.use_rnn:
        return IdentityCore(input_size)
    name = cfg.rnn_type
    check_rnn_type(name)
    core = _core_factories[name](cfg, input_size)
    _check_core(core, name)
    # today's dispatch was on memory_len alone: a module whose class would call the other forward_step form is
    # wrapped (e.g. a Core subclass with a memory that does not subclass MemoryCore)
    native = isinstance(core, Core) and isinstance(core, MemoryCore) == bool(getattr(core, "memory_len", 0))
    return core if native else ForeignCore(core)
