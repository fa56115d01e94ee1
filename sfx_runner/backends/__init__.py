"""Backends, loaded on first use: ``get_backend("slurm")`` imports only the slurm backend.

:data:`BACKENDS` maps each backend name to its module; the backend class is the
:class:`~sfx_runner.backends.base.Backend` subclass in that module whose ``name`` is the backend name.
"""

from __future__ import annotations

import importlib
import inspect

from sfx_runner.backends.base import Backend
from sfx_runner.errors import RunnerError

BACKENDS: dict[str, str] = {
    "processes": "sfx_runner.backends.processes",
    "slurm": "sfx_runner.backends.slurm",
    "ngc": "sfx_runner.backends.ngc",
}


def get_backend(name: str) -> type[Backend]:
    """The backend class called ``name``.

    Raises:
        RunnerError: an unknown name, or a backend module that is missing from this installation.
    """
    if name not in BACKENDS:
        raise RunnerError(f"unknown runner {name!r}; allowed: {', '.join(BACKENDS)}")
    module_name = BACKENDS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name:
            raise
        raise RunnerError(f"runner {name!r} is not available: module {module_name} is missing") from None
    for _, obj in inspect.getmembers(module, inspect.isclass):
        if issubclass(obj, Backend) and not inspect.isabstract(obj) and getattr(obj, "name", None) == name:
            return obj
    raise RunnerError(f"runner {name!r}: {module_name} defines no Backend subclass with name = {name!r}")


__all__ = ["BACKENDS", "Backend", "get_backend"]
