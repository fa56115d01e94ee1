"""Named optimizers: an agent's optimizers, each under the name its state is checkpointed by and the flag that
sets its learning rate, so that schedules and PBT (:meth:`NamedOptimizers.set_learning_rates`), checkpoints
(:meth:`~NamedOptimizers.state_dict`) and the reported rate are written once for every agent; and the choice of
Adam's fused kernel (:func:`fused_adam`), made once per agent.
"""

from __future__ import annotations

from typing import Any, Collection, Iterable, Iterator, Mapping

import torch

__all__ = ["NamedOptimizers", "fused_adam", "use_fused_adam"]


class NamedOptimizers(Mapping[str, torch.optim.Optimizer]):
    """An agent's optimizers by name (a read-only mapping name -> optimizer, in the order they were added).

    Args:
        fused_on_cpu: every Adam of this agent takes the fused kernel on the CPU too (:func:`use_fused_adam`).
    """

    def __init__(self, fused_on_cpu: bool = False) -> None:
        self.fused_on_cpu = bool(fused_on_cpu)
        self._optimizers: dict[str, torch.optim.Optimizer] = {}
        self._lr_flags: dict[str, str] = {}

    def adam(self, name: str, params: Iterable[Any], lr_flag: str, cfg: Any,
             eps: float | None = None) -> torch.optim.Adam:
        """Add (and return) an Adam over ``params`` named ``name``: learning rate ``cfg.<lr_flag>``, betas
        ``--adam_beta1`` / ``--adam_beta2``, epsilon ``eps`` (None: PyTorch's 1e-8)."""
        kwargs: dict[str, Any] = {"lr": getattr(cfg, lr_flag), "betas": (cfg.adam_beta1, cfg.adam_beta2)}
        if eps is not None:
            kwargs["eps"] = eps
        return self.add(name, fused_adam(params, fused_on_cpu=self.fused_on_cpu, **kwargs), lr_flag)

    def add(self, name: str, optimizer: torch.optim.Optimizer, lr_flag: str) -> torch.optim.Optimizer:
        """Add an optimizer built elsewhere; ``lr_flag``: the cfg field its learning rate is."""
        if name in self._optimizers:
            raise ValueError(f"an optimizer named {name!r} exists already")
        self._optimizers[name] = optimizer
        self._lr_flags[name] = lr_flag
        return optimizer

    def __getitem__(self, name: str) -> torch.optim.Optimizer:
        return self._optimizers[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._optimizers)

    def __len__(self) -> int:
        return len(self._optimizers)

    def set_learning_rates(self, cfg: Any, scale: float = 1.0) -> None:
        """Every optimizer's rate becomes its flag's value times ``scale`` (``--lr_schedule``'s factor): after a
        PBT mutation or a resumed run's flags, and at every change of the schedule."""
        for name, optimizer in self._optimizers.items():
            lr = float(getattr(cfg, self._lr_flags[name])) * scale
            for group in optimizer.param_groups:
                group["lr"] = lr

    def lr(self, name: str) -> float:
        """The rate ``name`` steps with now."""
        return float(self._optimizers[name].param_groups[0]["lr"])

    def state_dict(self) -> dict[str, Any]:
        """``{name: optimizer state}``: the checkpoint's entries."""
        return {name: optimizer.state_dict() for name, optimizer in self._optimizers.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Load each optimizer whose name ``state`` has (a checkpoint from before it existed: it starts afresh)."""
        for name, optimizer in self._optimizers.items():
            if name in state:
                optimizer.load_state_dict(state[name])


def use_fused_adam(device_types: Collection[str], all_floating: bool, fused_on_cpu: bool = False) -> bool:
    """Whether an Adam over parameters on ``device_types`` (``torch.device.type`` of each, e.g. ``{"cuda"}``)
    asks for the fused kernel: on CUDA when every parameter is there and floating point; on the CPU only when
    the agent says so (``fused_on_cpu``, for an agent that measured it faster: PyTorch's CPU default is the
    per-tensor loop, and a changed kernel changes the last bits of every step); never for parameters spread
    over several devices, nor on another accelerator (not measured)."""
    types = set(device_types)
    if not all_floating or len(types) != 1:
        return False
    return types == {"cuda"} or (types == {"cpu"} and fused_on_cpu)


def fused_adam(params: Iterable[torch.Tensor], fused_on_cpu: bool = False, **kwargs: Any) -> torch.optim.Adam:
    """``torch.optim.Adam(params, **kwargs)`` with ``fused=True`` where :func:`use_fused_adam` says so and this
    PyTorch has the kernel for these tensors (else the plain one). On a GPU the fused kernel is one launch per
    step for all of a network's tensors instead of several per tensor. Give the parameters where they train
    (the learner builds an agent's optimizers after its model moved to its device)."""
    params = list(params)
    tensors = [p for group in params for p in (group["params"] if isinstance(group, dict) else [group])]
    if use_fused_adam({p.device.type for p in tensors}, all(p.is_floating_point() for p in tensors), fused_on_cpu):
        try:
            return torch.optim.Adam(params, fused=True, **kwargs)
        except (RuntimeError, TypeError, ValueError):  # no fused kernel in this build for these tensors
            pass
    return torch.optim.Adam(params, **kwargs)
