"""Transformer-XL core with a per-agent episodic memory: ``--rnn_type=trxl``.

The layer is TrXL-I (Parisotto et al. 2020, "Stabilizing Transformers for Reinforcement Learning",
section 3): layer norm on the *input* of each submodule and a ReLU on its output before the residual
connection; ``--trxl_gate=gru`` replaces both residual connections with GTrXL's GRU-type gate (their
eq. 5, gate bias 2 so a fresh layer starts close to the identity). Attention is Transformer-XL's
relative multi-head attention (Dai et al. 2019, "Transformer-XL", section 3.3): for a query at step
``i`` and a key at step ``j``

    score(i, j) = ((q_i + u) . k_j + (q_i + v) . W_R r_{i-j}) / sqrt(d_head)

with sinusoidal ``r`` and learned ``u``, ``v`` per layer and head. One layer ``l`` (``E``: the
layer's input ``[B, T, d]``; ``M_l``: the same layer's inputs at the agent's last ``mem_len`` steps,
held without gradient)::

    Z  = LayerNorm([M_l, E]);  Y = E + ReLU(RelMHA(Z[-T:], Z))       (or gate(E, ReLU(...)))
    E' = Y + ReLU(W_2 ReLU(W_1 LayerNorm(Y)))                          (or gate(Y, ReLU(...)))

and a final LayerNorm on the top layer's output (pre-LN stacks otherwise hand an unnormalised
residual stream to the heads).

**Window and episodes.** A query sees itself and the keys of the last ``mem_len`` steps (distances
``0..mem_len``) that belong to its own episode; nothing before the agent's current episode start,
and inside a learner's rollout nothing before a reset, is visible. Acting step by step and the
learner's evaluation of a whole rollout therefore attend to exactly the same keys.

**State and memory, as the engine stores them** (the :class:`~sfx.models.cores.Core` memory
declaration): the flat state row is ``[valid, pos]``: how many of the memory's entries belong to the
current episode (at most ``mem_len``) and the ring row the next entry goes to; an episode start
resets it to zeros, which masks the whole memory without touching it. The memory itself is a ring of
``mem_len + 1`` entries per agent (``memory_len``), each the ``n_layer`` layer inputs of one step
concatenated (``memory_width = n_layer * d_model``); the engine keeps it in shared memory, passes it
in (``[B, mem_len + 1, width]`` in ring order) and writes the step's entry back at
``memory_index(states)``. The row written is the one spare row no step can see (the oldest), and it
is taken from the state before the step, so a step done twice (a restarted policy worker answering a
resent request) sees the same keys both times and leaves the same memory.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from sfx.errors import ConfigError
from sfx.models.cores import MemoryCore, register_builtin_core

TRXL_GATES = ("none", "gru")


def sinusoid_embedding(length: int, dim: int) -> torch.Tensor:
    """``[length, dim]`` sinusoids of the distances ``0..length-1`` (Vaswani et al. 2017, section 3.5),
    the sines of all frequencies first, then the cosines."""
    half = (dim + 1) // 2
    inv_freq = 1.0 / (10000.0 ** (torch.arange(half, dtype=torch.float64) / half))
    angles = torch.arange(length, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=1)[:, :dim].float()


class GRUGate(nn.Module):
    """GTrXL's gate in place of a residual connection (Parisotto et al. 2020, eq. 5), ``x`` the
    residual stream, ``y`` the submodule's output::

        r = sigmoid(W_r y + U_r x),  z = sigmoid(W_z y + U_z x - b_g),  h = tanh(W_g y + U_g (r * x))
        gate(x, y) = (1 - z) * x + z * h
    """

    def __init__(self, d_model: int, bias: float = 2.0):
        super().__init__()
        self.w = nn.Linear(d_model, 3 * d_model, bias=False)
        self.u_rz = nn.Linear(d_model, 2 * d_model, bias=False)
        self.u_g = nn.Linear(d_model, d_model, bias=False)
        self.bias = nn.Parameter(torch.full((d_model,), float(bias)))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        wr, wz, wg = self.w(y).chunk(3, dim=-1)
        ur, uz = self.u_rz(x).chunk(2, dim=-1)
        r = torch.sigmoid(wr + ur)
        z = torch.sigmoid(wz + uz - self.bias)
        h = torch.tanh(wg + self.u_g(r * x))
        return (1.0 - z) * x + z * h


class RelativeMultiHeadAttention(nn.Module):
    """Transformer-XL's relative multi-head attention over given keys (see the module docstring)."""

    def __init__(self, d_model: int, n_heads: int, d_head: int, dropout: float):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_head
        self.q = nn.Linear(d_model, n_heads * d_head, bias=False)
        self.kv = nn.Linear(d_model, 2 * n_heads * d_head, bias=False)
        self.r = nn.Linear(d_model, n_heads * d_head, bias=False)
        self.out = nn.Linear(n_heads * d_head, d_model, bias=False)
        self.u = nn.Parameter(torch.zeros(n_heads, d_head))
        self.v = nn.Parameter(torch.zeros(n_heads, d_head))
        self.drop_att = nn.Dropout(dropout)
        self.scale = 1.0 / math.sqrt(d_head)

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, dist: torch.Tensor, visible: torch.Tensor,
                pos_emb: torch.Tensor) -> torch.Tensor:
        """``queries [B, Tq, d]``, ``keys [B, K, d]`` (both layer-normed), ``dist [B, Tq, K]`` long distances
        (clamped to ``R - 1``), ``visible [B, Tq, K]`` bool (every query sees at least itself),
        ``pos_emb [R, d]`` -> ``[B, Tq, d]``."""
        B, Tq, _ = queries.shape
        K, H, D = keys.shape[1], self.n_heads, self.d_head
        q = self.q(queries).view(B, Tq, H, D)
        r = self.r(pos_emb).view(-1, H, D)
        position_all = torch.einsum("bthd,rhd->bhtr", q + self.v, r)                 # [B, H, Tq, R]
        position = torch.gather(position_all, 3, dist.unsqueeze(1).expand(B, H, Tq, K))
        if Tq == 1:
            return self._one_query(q[:, 0], keys, position[:, :, 0], visible[:, 0])
        k, v = self.kv(keys).view(B, K, 2, H, D).unbind(2)
        content = torch.einsum("bthd,bkhd->bhtk", q + self.u, k)
        scores = (content + position) * self.scale
        scores = scores.masked_fill(~visible.unsqueeze(1), torch.finfo(scores.dtype).min)
        att = self.drop_att(torch.softmax(scores, dim=-1))
        return self.out(torch.einsum("bhtk,bkhd->bthd", att, v).reshape(B, Tq, H * D))

    def _one_query(self, q: torch.Tensor, keys: torch.Tensor, position: torch.Tensor,
                   visible: torch.Tensor) -> torch.Tensor:
        """Acting (one query per agent, ``q [B, H, D]``, ``keys [B, K, d]``, ``position [B, H, K]``): the key
        and value projections folded into the query's side, ``(q + u) . (W_k z) = (W_k^T (q + u)) . z`` and
        ``sum_j a_j W_v z_j = W_v sum_j a_j z_j`` (no bias: exact), so no memory row is projected: about
        ``2 H D / (2 H)`` times fewer multiply-adds per memory row than projecting every key."""
        B, H, D = q.shape
        w_k, w_v = self.kv.weight.view(2, H, D, -1).unbind(0)                       # [H, D, d] each
        q_keys = torch.einsum("bhe,hed->bhd", q + self.u, w_k)                      # [B, H, d]
        content = torch.einsum("bhd,bkd->bhk", q_keys, keys)
        scores = (content + position) * self.scale
        scores = scores.masked_fill(~visible.unsqueeze(1), torch.finfo(scores.dtype).min)
        att = self.drop_att(torch.softmax(scores, dim=-1))
        mixed = torch.einsum("bhk,bkd->bhd", att, keys)                              # [B, H, d]
        return self.out(torch.einsum("bhd,hed->bhe", mixed, w_v).reshape(B, 1, H * D))


class TrXLLayer(nn.Module):
    """One TrXL-I (or GTrXL) layer: relative attention over [memory, segment], then a feed-forward block."""

    def __init__(self, d_model: int, n_heads: int, d_head: int, d_inner: int, dropout: float, gate: str):
        super().__init__()
        self.norm_att = nn.LayerNorm(d_model)
        self.attention = RelativeMultiHeadAttention(d_model, n_heads, d_head, dropout)
        self.norm_ff = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_inner), nn.ReLU(), nn.Dropout(dropout),
                                nn.Linear(d_inner, d_model), nn.Dropout(dropout))
        self.drop = nn.Dropout(dropout)
        self.gate_att = GRUGate(d_model) if gate == "gru" else None
        self.gate_ff = GRUGate(d_model) if gate == "gru" else None

    @staticmethod
    def _join(gate: GRUGate | None, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y if gate is None else gate(x, y)

    def forward(self, h: torch.Tensor, mem: torch.Tensor, dist: torch.Tensor, visible: torch.Tensor,
                pos_emb: torch.Tensor) -> torch.Tensor:
        """``h [B, T, d]`` this layer's inputs, ``mem [B, M, d]`` its inputs at past steps -> ``[B, T, d]``."""
        M = mem.shape[1]
        z = self.norm_att(torch.cat([mem, h], dim=1))
        a = self.attention(z[:, M:], z, dist, visible, pos_emb)
        y = self._join(self.gate_att, h, F.relu(self.drop(a)))
        return self._join(self.gate_ff, y, F.relu(self.ff(self.norm_ff(y))))


class TransformerXLCore(MemoryCore):
    """``n_layer`` TrXL-I layers of width ``d_model`` over a per-agent memory of ``mem_len`` steps.

    Inputs wider or narrower than ``d_model`` go through a linear projection first. State ``[valid,
    pos]`` and memory layout: see the module docstring.
    """

    def __init__(self, input_size: int, d_model: int, n_layer: int, n_heads: int, d_head: int, d_inner: int,
                 mem_len: int, dropout: float = 0.0, gate: str = "none"):
        super().__init__()
        for name, value in (("hidden_size", d_model), ("n_layer", n_layer), ("n_heads", n_heads),
                            ("d_head", d_head), ("d_inner", d_inner), ("mem_len", mem_len)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"--{name}={value!r} is not valid for --rnn_type=trxl; allowed: an integer >= 1")
        if not 0.0 <= float(dropout) < 1.0:
            raise ConfigError(f"--trxl_dropout={dropout!r} is not valid; allowed: a number in [0, 1)")
        if gate not in TRXL_GATES:
            raise ConfigError(f"--trxl_gate={gate!r} is not known; allowed: {', '.join(TRXL_GATES)}")
        self.d_model = d_model
        self.input_proj = nn.Identity() if input_size == d_model else nn.Linear(input_size, d_model)
        self.layers = nn.ModuleList(TrXLLayer(d_model, n_heads, d_head, d_inner, float(dropout), gate)
                                    for _ in range(n_layer))
        self.final_norm = nn.LayerNorm(d_model)
        self.out_size = d_model
        self.state_size = 2
        self.mem_len = mem_len            # steps a query reaches back
        self.memory_len = mem_len + 1     # ring rows: one spare, see the module docstring
        self.memory_width = n_layer * d_model
        # not part of the weights: rebuilt identically by every process
        self.register_buffer("pos_emb", sinusoid_embedding(mem_len + 1, d_model), persistent=False)

    def memory_index(self, states: torch.Tensor) -> torch.Tensor:
        """``[B]`` long: the ring row this step's memory entry goes to (``pos`` of the state before the step)."""
        return states[:, 1].round().long()

    def window(self, states: torch.Tensor, resets: torch.Tensor | None, T: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Which keys each of ``T`` queries sees, and at what distance.

        Keys are the ``R = mem_len + 1`` memory rows in ring order, then the ``T`` steps. Returns
        ``dist [B, T, R + T]`` long, clamped to ``mem_len`` (the embedding's last row; farther keys are
        never visible) and ``visible [B, T, R + T]`` bool. With ``M = mem_len``: a memory row written
        ``age`` steps before step 0 (age 1 = the step just before) is at distance ``age + t`` from query
        ``t``; it is visible when it belongs to the episode of step 0 (``age <= valid``), lies within the
        window (``age + t <= M``) and no reset happened at steps ``0..t``. Step ``s`` is visible from
        ``t`` when ``0 <= t - s <= M`` and no reset happened in ``s + 1..t``.
        """
        B, dev, M, R = states.shape[0], states.device, self.mem_len, self.memory_len
        valid = states[:, 0].round().long()
        pos = states[:, 1].round().long()
        steps = torch.arange(T, device=dev)
        age = (pos[:, None] - 1 - torch.arange(R, device=dev)[None, :]) % R + 1           # [B, R]
        mem_dist = age[:, None, :] + steps[None, :, None]                                   # [B, T, R]
        seg_dist = (steps[:, None] - steps[None, :]).expand(B, T, T)                        # [B, T, T]
        if resets is None:
            last_reset = torch.full((B, T), -1, dtype=torch.long, device=dev)
        else:
            marks = torch.where(resets.bool(), steps[None, :], torch.full_like(steps, -1)[None, :])
            last_reset = torch.cummax(marks, dim=1).values                                   # [B, T]
        mem_vis = ((last_reset < 0)[:, :, None] & (age <= valid[:, None])[:, None, :] & (mem_dist <= M))
        seg_vis = (seg_dist >= 0) & (seg_dist <= M) & (steps[None, None, :] >= last_reset[:, :, None])
        dist = torch.cat([mem_dist, seg_dist], dim=2).clamp(0, M)
        return dist, torch.cat([mem_vis, seg_vis], dim=2)

    def _run(self, x: torch.Tensor, states: torch.Tensor, resets: torch.Tensor | None,
             memory: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        h = self.input_proj(x)
        dist, visible = self.window(states, resets, x.shape[1])
        mem = memory.detach().to(h.dtype)  # the memory is what acting stored: no gradient through it
        d = self.d_model
        inputs = []
        for i, layer in enumerate(self.layers):
            inputs.append(h)
            h = layer(h, mem[:, :, i * d:(i + 1) * d], dist, visible, self.pos_emb)
        return self.final_norm(h), inputs

    def forward_step(self, x: torch.Tensor, states: torch.Tensor,
                     memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x [B, F]``, ``states [B, 2]``, ``memory [B, mem_len + 1, W]`` (ring order) -> ``(out [B, d_model],
        new_states [B, 2], entry [B, W])``; the caller writes ``entry`` at ``memory_index(states)``."""
        out, inputs = self._run(x.unsqueeze(1), states, None, memory)
        entry = torch.cat([h[:, 0] for h in inputs], dim=1)
        valid, pos = states[:, 0], states[:, 1]
        new_states = torch.stack([torch.clamp(valid + 1, max=self.mem_len),
                                  torch.remainder(pos + 1, self.memory_len)], dim=1)
        return out[:, 0], new_states, entry

    def forward_sequence(self, x: torch.Tensor, states: torch.Tensor, resets: torch.Tensor,
                         memory: torch.Tensor) -> torch.Tensor:
        """``x [B, T, F]``, ``states [B, 2]`` and ``memory [B, mem_len + 1, W]`` as before step 0, ``resets [B, T]``
        -> ``out [B, T, d_model]``; equals ``T`` calls of ``forward_step`` (whose memory writes the
        segment's own steps stand in for here, recomputed with gradient)."""
        out, _ = self._run(x, states, resets, memory)
        return out


def trxl_factory(cfg, input_size: int) -> TransformerXLCore:
    """``--rnn_type=trxl``: ``--hidden_size`` wide, ``--n_layer``, ``--n_heads``, ``--d_head``, ``--d_inner``,
    ``--mem_len``, ``--trxl_dropout``, ``--trxl_gate``."""
    return TransformerXLCore(input_size, cfg.hidden_size, cfg.n_layer, cfg.n_heads, cfg.d_head, cfg.d_inner,
                             cfg.mem_len, cfg.trxl_dropout, cfg.trxl_gate)


register_builtin_core("trxl", trxl_factory)
