"""How a registered env family reaches the worker processes, wherever it was registered.

Worker processes start from a forkserver: they import sfx, not the user's notebook or script, so a family
registered in ``__main__`` (a notebook cell, ``python -c``, a script's ``if __name__ == '__main__':`` block)
is unknown there, and plain pickle sends its functions by reference (``__main__.make_my_env``), which a
worker cannot resolve. :func:`family_for_workers` gives the family in a form that pickles by value with
cloudpickle (already a dependency of gymnasium): functions and classes defined in ``__main__`` travel as
code, those of importable modules still by reference. The worker unpickles a plain :class:`EnvFamily`
and registers it (``ensure_registered``).
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

from sfx.envs.registry import EnvFamily, find_family
from sfx.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class TravellingFamily(EnvFamily):
    """An :class:`EnvFamily` that pickles by value (cloudpickle) and unpickles as a plain EnvFamily.

    It behaves as the family it copies in this process; only pickling differs."""

    def plain(self) -> EnvFamily:
        return EnvFamily(**{f.name: getattr(self, f.name) for f in dataclasses.fields(EnvFamily)})

    def __reduce__(self) -> tuple:
        import cloudpickle

        try:
            data = cloudpickle.dumps(self.plain())
        except Exception as e:  # noqa: BLE001 - whatever the user's functions hold that cannot be pickled
            raise ConfigError(
                f"env {self.prefix!r} cannot travel to worker processes ({type(e).__name__}: {e}); register it "
                f"at the top level of an importable module (and name that module in SFX_EXTRA_ENV_MODULES), "
                f"or train with --serial_mode=True") from None
        return pickle.loads, (data,)


def family_for_workers(env_name: str) -> TravellingFamily:
    """The family of ``env_name`` as worker processes should receive it (see the module docstring)."""
    family = find_family(env_name)
    fields = {f.name: getattr(family, f.name) for f in dataclasses.fields(EnvFamily)}
    return TravellingFamily(**fields)
