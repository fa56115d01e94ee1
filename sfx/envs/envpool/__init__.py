"""EnvPool as a backend of sfx's env families: ``--env_backend=envpool``.

`EnvPool <https://github.com/sail-sg/envpool>`_ (1.2.x) steps many envs of one task in C++ threads. For the
families it serves, a rollout worker's split can step as one EnvPool pool instead of the family's Python envs
one after the other (:mod:`sfx.envs.vector`):

* ``atari_`` (``--env_backend=envpool``; the Python ale-py stack stays the default),
* ``mujoco_`` (``--env_backend=envpool``),
* ``minigrid_`` (``--env_backend=envpool``),
* ``procgen_`` (EnvPool only: its one backend).

The family translates its own flags into EnvPool's config (its ``<family>_options``, e.g. :func:`sfx.envs.atari.atari_options`), so a flag means
the same thing on either backend, and refuses in one line a value EnvPool cannot serve; the pool's episode
semantics are translated to sfx's by :class:`~sfx.envs.envpool.vector.EnvPoolVector`.
``docs/environments/envpool.md`` lists what differs and when each backend is faster.
"""

from __future__ import annotations

import argparse
from typing import Any

from sfx.errors import ConfigError

BACKENDS = ("python", "envpool")
EXTRA = "envpool"
MINIMUM = "1.2.5"


def add_backend_params(group: Any, choices: tuple[str, ...] = BACKENDS, default: str = "python") -> None:
    """``--env_backend`` and ``--envpool_num_threads`` in a family's flag group (each family that EnvPool serves
    adds them; only one family is loaded per command line)."""
    group.add_argument("--env_backend", choices=choices, default=default,
                       help="what steps the envs: python = the family's Python envs, one after the other in each "
                            "rollout worker; envpool = EnvPool's C++ pool, one per split "
                            f"(pip install -e .[{EXTRA}]; docs/environments/envpool.md)"
                       + ("" if "python" in choices else "; this family has no Python backend"))
    group.add_argument("--envpool_num_threads", type=int, default=1,
                       help="with --env_backend=envpool: EnvPool's C++ threads per pool (one pool per rollout "
                            "worker split); 0 = one per env of the pool")


def uses_envpool(cfg: Any) -> bool:
    """Whether ``cfg`` asks for the EnvPool backend."""
    return cfg.env_backend == "envpool"


def require_envpool() -> Any:
    """The ``envpool`` module; :class:`ConfigError` in one line naming the extra when it is not installed."""
    try:
        import envpool
    except ImportError as e:
        raise ConfigError(f"--env_backend=envpool needs the optional package envpool>={MINIMUM}, which cannot be "
                          f"imported ({type(e).__name__}: {e}); install it with: pip install -e .[{EXTRA}] (in the "
                          f"sfx checkout; or pip install 'envpool>={MINIMUM}')") from None
    return envpool


def check_envpool_cfg(cfg: argparse.Namespace, task_id: str, served: list[str]) -> None:
    """:class:`ConfigError` when envpool is missing, ``task_id`` is not one of its tasks (listing ``served``, the
    family's names it serves), or ``--envpool_num_threads`` is negative."""
    envpool = require_envpool()
    if task_id not in envpool.list_all_envs():
        raise ConfigError(f"--env={cfg.env} is not served by --env_backend=envpool (EnvPool {envpool.__version__} has "
                          f"no task {task_id}); it serves: {', '.join(served)}")
    threads = cfg.envpool_num_threads
    if not isinstance(threads, int) or threads < 0:
        raise ConfigError(f"--envpool_num_threads={threads} must be an integer >= 0 (0 = one thread per env)")


def not_served(flag: str, value: Any, allowed: str) -> ConfigError:
    """The one-line error for a flag value the EnvPool backend cannot serve."""
    return ConfigError(f"{flag}={value} is not served by --env_backend=envpool; allowed there: {allowed}")


def pool_threads(cfg: Any, num_envs: int) -> int:
    """EnvPool threads for a pool of ``num_envs`` envs (``--envpool_num_threads``; 0 = one per env)."""
    threads = cfg.envpool_num_threads
    return num_envs if threads == 0 else min(threads, num_envs)
