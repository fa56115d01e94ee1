"""Data-parallel learners: the learners of one policy on several ranks, one torch.distributed group.

Each rank trains on its own minibatch; :class:`GradientGroup` is what ``learning_step`` needs to make
the update the one a single learner would compute on all ranks' minibatches together:

- ``sum(t)``: a tensor summed over ranks (valid-sample counts, advantage and normalizer moments);
- ``any(flag)``: a non-finite minibatch on any rank is skipped on every rank (collectives stay in
  step, nobody waits for a rank that skipped); ``max(value)`` the same for small integers (the vote to
  stop);
- ``sum_gradients(params)``: every gradient summed over ranks in one flat all-reduce. Each rank
  scales its loss by its share of the valid samples (local / global count), so the sum is the
  gradient of the mean over all ranks' samples (every APPO loss term is such a mean).

Every rank then clips and steps with identical gradients, so weights stay identical.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Iterable

import torch

log = logging.getLogger(__name__)


class RankLost(RuntimeError):
    """A collective with the other ranks failed: one of them died, hung past the collective timeout or
    was killed. The training must end on every rank and be started again (it resumes from rank 0's
    checkpoint): ``python -m sfx.train`` exits with its "resume me" code then."""


def join_group(ranks: Any, device: torch.device, timeout_sec: float) -> "GradientGroup":
    """This rank's learner joins the learners of every rank (``ranks``: :class:`~sfx.engine.ranks.RankInfo`)
    through the training's store (:func:`sfx.engine.rendezvous.connect_store`: torchrun's, or the one rank
    0's coordinator serves), NCCL on a GPU, gloo on the CPU; a collective that waits longer than
    ``timeout_sec`` raises (a dead rank ends the others instead of hanging them)."""
    import datetime

    import torch.distributed as dist

    from sfx.engine.ranks import process_group_backend
    from sfx.engine.rendezvous import connect_store, gloo_interface

    backend = process_group_backend(device.type)
    if backend == "nccl":
        torch.cuda.set_device(device)
    else:
        interface = gloo_interface(str(ranks.master_addr))
        if interface is not None:
            log.info("this host's name resolves to a loopback address: gloo meets the other ranks on %s "
                     "(GLOO_SOCKET_IFNAME=%s; set it yourself to choose another)", interface, interface)
            os.environ["GLOO_SOCKET_IFNAME"] = interface
    store = connect_store(ranks, timeout_sec, "learners")
    dist.init_process_group(backend, store=store, rank=ranks.rank, world_size=ranks.world_size,
                            timeout=datetime.timedelta(seconds=timeout_sec))
    return GradientGroup()


class GradientGroup:
    def __init__(self, group: Any = None) -> None:
        import torch.distributed as dist

        self.dist = dist
        self.group = group
        self.world_size = dist.get_world_size(group)

    def _all_reduce(self, t: torch.Tensor, op: Any) -> None:
        try:
            self.dist.all_reduce(t, op=op, group=self.group)
        except RuntimeError as e:
            raise _lost(e) from e

    def sum(self, t: torch.Tensor) -> torch.Tensor:
        out = t.detach().clone()
        self._all_reduce(out, self.dist.ReduceOp.SUM)
        return out

    def any(self, flag: bool) -> bool:
        return self.max(1 if flag else 0) > 0

    def max(self, value: int) -> int:
        """The largest of the ranks' small integers (exact in float32 below 2**24)."""
        t = torch.tensor([float(value)])
        self._all_reduce(t, self.dist.ReduceOp.MAX)
        return int(t.item())

    def sum_gradients(self, params: Iterable[torch.nn.Parameter]) -> None:
        params = [p for p in params if p.requires_grad]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        self._all_reduce(flat, self.dist.ReduceOp.SUM)
        offset = 0
        for p, g in zip(params, grads):
            n = g.numel()
            p.grad = flat[offset:offset + n].view_as(g).clone() if p.grad is None else p.grad.copy_(
                flat[offset:offset + n].view_as(g))
            offset += n

    def broadcast_state(self, module: torch.nn.Module, src: int = 0) -> None:
        """Every rank takes rank ``src``'s parameters and buffers (at the start: identical weights
        whatever each rank's seed or checkpoint)."""
        tensors = [t for t in module.state_dict(keep_vars=True).values() if torch.is_tensor(t)]
        with torch.no_grad():
            for t in tensors:
                data = t.data if isinstance(t, torch.nn.Parameter) else t
                try:
                    self.dist.broadcast(data, src=src, group=self.group)
                except RuntimeError as e:
                    raise _lost(e) from e

    def weights_match(self, module: torch.nn.Module) -> bool:
        """Whether every rank holds the same weights: per-tensor float64 sums compared by an all-reduced
        max and min (a cheap checksum: bitwise-equal weights give equal sums; any drift shows)."""
        sums = torch.stack([t.detach().double().sum() for t in module.state_dict().values()
                            if torch.is_tensor(t) and t.is_floating_point()])
        high, low = sums.clone(), sums.clone()
        self._all_reduce(high, self.dist.ReduceOp.MAX)
        self._all_reduce(low, self.dist.ReduceOp.MIN)
        return bool(torch.equal(high, low))

    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """Rank ``src``'s ``obj`` on every rank (small things: counters, an optimizer's state)."""
        box = [obj]
        try:
            self.dist.broadcast_object_list(box, src=src, group=self.group)
        except RuntimeError as e:
            raise _lost(e) from e
        return box[0]

    def close(self, barrier_timeout_sec: float = 10.0) -> None:
        """Leave the group. The ranks first wait for each other (at most ``barrier_timeout_sec``: a dead
        rank must not hold the others): a rank that tore its group down while another still used it
        made that one abort in gloo's threads ("terminate called without an active exception")."""
        import datetime

        if not self.dist.is_initialized():
            return
        try:
            if self.dist.get_backend(self.group) == "gloo":
                self.dist.monitored_barrier(self.group, timeout=datetime.timedelta(seconds=barrier_timeout_sec))
            else:
                self.dist.barrier(self.group)
        except Exception:  # noqa: BLE001 - another rank is gone: leave anyway
            pass
        self.dist.destroy_process_group()


def _lost(e: BaseException) -> RankLost:
    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
    return RankLost(f"a collective with the other ranks failed: another rank died, hung or was killed ({first[:300]})")
