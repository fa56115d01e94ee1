"""Recurrent cores with flat states.

The engine keeps one recurrent state per agent as a flat float32 row ``[S]`` in shared memory,
whatever the core. Layouts:

* identity (no RNN): ``S = 0`` (the engine stores one dummy column, passed through unchanged);
* GRU: ``S = layers * hidden``, row = ``h`` of layer 0, layer 1, ...;
* LSTM: ``S = 2 * layers * hidden``, row = all layers' ``h``, then all layers' ``c``.

``forward_sequence`` must give exactly what stepping one observation at a time gives, with the
state zeroed before every step whose ``resets`` flag is set. Without resets after the first step
it is one cuDNN-style call over the whole sequence. With resets inside, each row is cut into
segments at its resets and all segments run as one packed sequence (one call, no loop over time,
no padding): a segment starting at a reset starts from zeros, a row's first segment from the
row's initial state.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
from torch.nn.utils.rnn import PackedSequence

from sfx.cfg import ConfigError

RNN_TYPES = ("gru", "lstm")


class IdentityCore(nn.Module):
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


class RnnCore(nn.Module):
    """``torch.nn.GRU`` / ``torch.nn.LSTM`` (``num_layers`` deep) behind the flat-state interface."""

    def __init__(self, input_size: int, hidden_size: int, rnn_type: str = "gru", num_layers: int = 1):
        super().__init__()
        if rnn_type not in RNN_TYPES:
            raise ConfigError(f"rnn_type {rnn_type!r} is not known; allowed: {', '.join(RNN_TYPES)}")
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
        """``x [B, T, F]``, ``states [B, S]`` (before step 0), ``resets [B, T]`` bool (zero the
        state before that step) -> ``out [B, T, H]``."""
        resets = resets.bool()
        keep0 = (~resets[:, 0]).to(states.dtype).unsqueeze(1)
        states = states * keep0
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

        # a row's first segment continues the row's state (already zeroed if reset at t = 0);
        # a segment opened by a reset starts from zeros
        row = seg_start // T
        first = (seg_start % T == 0).to(states.dtype).unsqueeze(1)
        seg_states = (states[row] * first)[order]
        out, _ = self.rnn(packed, self.unflatten(seg_states))
        return out.data[packed_idx].reshape(B, T, self.hidden_size)


def make_core(cfg: Any, input_size: int) -> nn.Module:
    """Identity when ``cfg.use_rnn`` is False, else a GRU/LSTM of ``cfg.hidden_size``."""
    if not getattr(cfg, "use_rnn", True):
        return IdentityCore(input_size)
    return RnnCore(input_size, getattr(cfg, "hidden_size", 512), getattr(cfg, "rnn_type", "gru"),
                   getattr(cfg, "rnn_num_layers", 1))
