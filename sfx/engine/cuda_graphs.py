"""Acting forward passes replayed from CUDA graphs (``--inference_cuda_graphs``).

A policy worker's forward pass over ~100 rows is a few hundred small kernels: on a GPU its time goes to
launching them from Python, not to computing (NVIDIA H200, doom_basic conv + LSTM 512, 16 x 16 envs: 3 ms per
forward pass of 88 rows, the policy worker 94% busy, the GPU 16%). A CUDA graph records the launches once and
replays them with one call.

A graph has fixed shapes, so a batch is padded up to the next of a few bucket sizes (:func:`bucket_sizes`);
each bucket's graph is captured the first time a batch of its size comes. The padding rows hold what an earlier
batch left there: rows never meet in an acting forward pass (eval mode, no batch statistics), and their outputs
are dropped. The inputs are copied into the graphs' own buffers (one per key, shared by every bucket: a bucket
reads the first rows); the outputs are the graph's, valid until the next replay (the policy worker copies them
to the host before it asks for another batch).

Weights: the graphs read the model's parameters where they live, and every weight update copies into those
tensors in place (:meth:`~sfx.engine.buffers.WeightsBuffer.read_into`, the learner placement's
``LocalWeights.publish``), so each replay acts with the weights of the version it records.

A model's forward pass must therefore compute from its tensors each time: a value cached in Python between
passes (keyed on the weights' versions, say) would be frozen into the graph at its capture-time value. sfx's own
such cache (the input normalizer's affine factors, :mod:`sfx.algo.normalizers`) is bypassed while a graph
captures.

Used on a CUDA device for a model without a memory (Transformer-XL) or per-task outputs (PopArt); a batch
larger than the largest bucket, or a model whose forward pass cannot be captured (it synchronises with the
host, say), runs the eager forward pass (the latter said once in the log).
"""

from __future__ import annotations

import logging
import math
from typing import Any, Mapping

import torch

log = logging.getLogger(__name__)

SMALLEST_BUCKET = 8
LARGEST_BUCKET = 4096  # beyond it a batch runs eagerly (a forward pass that big is compute, not launches)
BUCKET_GROWTH = 1.5  # each bucket is at most this much larger than the one below: padding wastes < 1/3
WARMUP_PASSES = 2  # eager passes on a side stream before a capture (cuDNN / cuBLAS pick and allocate there)


def bucket_sizes(max_rows: int, smallest: int = SMALLEST_BUCKET, largest: int = LARGEST_BUCKET,
                 growth: float = BUCKET_GROWTH) -> list[int]:
    """Batch sizes the graphs are captured for: multiples of 8 from ``smallest`` up, each at most ``growth``
    times the one below (or 8 more), the last the first that holds ``max_rows`` (at most ``largest``)."""
    if max_rows < 1:
        raise ValueError(f"max_rows={max_rows}: a policy acts for at least one agent")
    sizes = [smallest]
    while sizes[-1] < min(max_rows, largest):
        nxt = max(sizes[-1] + 8, int(math.floor(sizes[-1] * growth / 8)) * 8)
        sizes.append(min(nxt, largest))
    return sizes


def pick_bucket(sizes: list[int], n: int) -> int | None:
    """The smallest of ``sizes`` that holds ``n`` rows; None if none does."""
    for s in sizes:
        if s >= n:
            return s
    return None


class _Captured:
    def __init__(self, graph: Any, out: dict[str, torch.Tensor]) -> None:
        self.graph = graph
        self.out = out


class GraphedStep:
    """``model.forward_step(obs, rnn_states)`` replayed from CUDA graphs (see the module docstring).
    ``__call__`` returns the outputs (views of the graph's own tensors, rows ``:n``), or None where the batch
    must run eagerly."""

    def __init__(self, model: Any, device: torch.device, max_rows: int) -> None:
        self.model = model
        self.device = device
        self.sizes = bucket_sizes(max_rows)
        self.graphs: dict[int, _Captured] = {}
        self.pool = None
        self.obs: dict[str, torch.Tensor] | None = None
        self.rnn: torch.Tensor | None = None
        self.broken: str | None = None  # why capturing failed: every batch runs eagerly from then on

    @classmethod
    def create(cls, cfg: Any, model: Any, device: torch.device, max_rows: int) -> "GraphedStep | None":
        """The graphs for ``model`` where they apply (``--inference_cuda_graphs``, a CUDA device, no memory
        core, no per-task outputs), else None."""
        if not cfg.inference_cuda_graphs or device.type != "cuda":
            return None
        if getattr(model, "memory_len", 0) or getattr(model, "reads_tasks", False):
            return None
        return cls(model, device, max_rows)

    def __call__(self, obs: Mapping[str, torch.Tensor], rnn_states: torch.Tensor) -> dict[str, torch.Tensor] | None:
        if self.broken is not None:
            return None
        n = rnn_states.shape[0]
        bucket = pick_bucket(self.sizes, n)
        if bucket is None:
            return None
        if self.obs is None:
            top = self.sizes[-1]
            self.obs = {k: torch.zeros((top, *v.shape[1:]), dtype=v.dtype, device=self.device) for k, v in obs.items()}
            self.rnn = torch.zeros((top, *rnn_states.shape[1:]), dtype=rnn_states.dtype, device=self.device)
        elif not self._fits(obs, rnn_states):
            return None
        for k, v in obs.items():
            self.obs[k][:n].copy_(v, non_blocking=True)
        self.rnn[:n].copy_(rnn_states, non_blocking=True)
        captured = self.graphs.get(bucket)
        if captured is None:
            captured = self._capture(bucket)
            if captured is None:
                return None
        captured.graph.replay()
        return {k: v[:n] for k, v in captured.out.items()}

    def _fits(self, obs: Mapping[str, torch.Tensor], rnn_states: torch.Tensor) -> bool:
        if obs.keys() != self.obs.keys():
            return False
        same = all(v.dtype == self.obs[k].dtype and v.shape[1:] == self.obs[k].shape[1:] for k, v in obs.items())
        return same and rnn_states.dtype == self.rnn.dtype and rnn_states.shape[1:] == self.rnn.shape[1:]

    def _capture(self, bucket: int) -> _Captured | None:
        obs = {k: v[:bucket] for k, v in self.obs.items()}
        rnn = self.rnn[:bucket]
        try:
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(WARMUP_PASSES):
                    self.model.forward_step(obs, rnn)
            torch.cuda.current_stream(self.device).wait_stream(side)
            if self.pool is None:
                self.pool = torch.cuda.graph_pool_handle()
            graph = torch.cuda.CUDAGraph()
            # thread_local: with --inference=learner the learner's thread keeps using the GPU meanwhile
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                out = self.model.forward_step(obs, rnn)
        except Exception as e:  # noqa: BLE001 - any capture failure means: act eagerly, say why once
            self.broken = f"{type(e).__name__}: {e}"
            log.warning("inference: the model's forward pass could not be captured in a CUDA graph (%s); acting "
                        "eagerly from now on (--inference_cuda_graphs=False says so from the start)", self.broken)
            return None
        captured = _Captured(graph, out)
        self.graphs[bucket] = captured
        return captured
