"""Startup checks of what the machine gives a run, with advice instead of a crash later:
shared memory (/dev/shm) for the trajectory buffers, the open-file limit, CPUs for the workers."""

from __future__ import annotations

import logging
import math
import os
import resource
import shutil
from typing import Any, Mapping

import numpy as np

from sfx.errors import ConfigError

log = logging.getLogger(__name__)

SHM_DIR = "/dev/shm"
SHM_HEADROOM = 1.1  # torch and the queues need a little beyond the trajectory buffers
FDS_PER_ENV = 16    # generous: env processes, pipes, shared tensors passed to each worker
FDS_BASE = 1024


def trajectory_buffer_bytes(obs_spec: dict, rollout: int, rnn_size: int, action_dim: int,
                            agent_fields: Mapping[str, Any] | None, num_slots: int, num_policies: int,
                            num_agents_total: int, memory_floats: int = 0, final_obs: bool = False) -> int:
    """Bytes of shared memory :func:`sfx.engine.buffers.allocate_trajectory_buffers` and the agent
    buffers will take (``obs_spec``: key -> (shape, dtype); ``agent_fields``: the acting rule's per-step
    fields, name -> :class:`~sfx.agents.FieldSpec`; ``memory_floats``: a memory core's
    ``memory_len * memory_width``, held once per slot and once per agent; ``final_obs``: the slots keep
    the final observation of time-limit steps)."""
    obs_bytes = sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in obs_spec.values())
    # actions, rewards, policy versions; terminated, truncated, active
    fixed_step = 4 * action_dim + 4 + 8 + 3
    agent_step = sum(spec.bytes_per_step for spec in (agent_fields or {}).values())
    per_slot = ((rollout + 1) * (obs_bytes + 4 * rnn_size) + rollout * (fixed_step + agent_step)
                + (rollout * obs_bytes if final_obs else 0) + 8 + 4 * memory_floats)
    agents = num_agents_total * (obs_bytes + 4 * rnn_size + 4 * memory_floats)
    return per_slot * num_slots * num_policies + agents


def check_shared_memory(needed_bytes: int, shm_dir: str = SHM_DIR) -> None:
    """ConfigError when ``shm_dir`` (where torch puts shared tensors) has too little room."""
    if not os.path.isdir(shm_dir):
        return
    free = shutil.disk_usage(shm_dir).free
    if needed_bytes * SHM_HEADROOM > free:
        mib = 1024 * 1024
        raise ConfigError(
            f"the trajectory buffers need {math.ceil(needed_bytes / mib):,} MiB of shared memory but {shm_dir} has "
            f"{free // mib:,} MiB free. Give it more (docker run --shm-size=..., or remount {shm_dir} larger), "
            f"or use less: --num_envs_per_worker, --num_workers, --rollout, --traj_buffers_excess_ratio, a smaller "
            f"observation (--res_w/--res_h)")


def check_host_memory(needed_bytes: int, what: str, advice: str) -> None:
    """ConfigError when the machine's available memory is less than ``needed_bytes`` (with 10% to spare)
    for ``what``; ``advice`` says which flags make it smaller."""
    import psutil

    available = psutil.virtual_memory().available
    if needed_bytes * SHM_HEADROOM > available:
        mib = 1024 * 1024
        raise ConfigError(f"{what} need {math.ceil(needed_bytes / mib):,} MiB of memory but the machine has "
                          f"{available // mib:,} MiB available; {advice}")


def ensure_open_file_limit(num_envs_total: int) -> int:
    """Raise this process's soft open-file limit towards what the run may need (children inherit
    it); warn when the hard limit is too low. Returns the soft limit in force."""
    want = FDS_BASE + FDS_PER_ENV * num_envs_total
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= want or soft == resource.RLIM_INFINITY:
        return soft
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        log.info("raised the open-file limit from %d to %d for %d envs", soft, target, num_envs_total)
        soft = target
    if soft < want:
        log.warning("the open-file limit is %d and this run may need about %d (%d envs): if workers fail with "
                    "'Too many open files', raise it (ulimit -n %d) or use fewer envs", soft, want, num_envs_total,
                    want)
    return soft


def check_cpus(cfg: Any) -> None:
    """Warn when the workers far outnumber the CPU cores (a typo, or a copied big-machine command)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cfg.num_workers > 4 * cpus:
        log.warning("--num_workers=%d on %d CPU cores: each worker steps its envs in turn, so more than a few "
                    "workers per core only adds switching; --num_workers=%d with more --num_envs_per_worker is "
                    "usually faster", cfg.num_workers, cpus, cpus)


def process_rss_mb(pids: dict[str, int]) -> dict[str, float]:
    """Resident memory of each named process in MiB (processes that are gone are left out)."""
    import psutil

    out = {}
    for name, pid in pids.items():
        try:
            out[name] = psutil.Process(pid).memory_info().rss / (1024 * 1024)
        except (psutil.Error, OSError):
            continue
    return out
