"""Where am I in a multi-rank training: rank, world size and rendezvous address from the launcher's
environment (torchrun or Slurm's srun), the device of this rank and the process-group backend.

Pure functions of an environment mapping (``os.environ`` by default): nothing here touches torch, so
the entry points can call :func:`detect_ranks` before any import-heavy work and fail early with one
clear :class:`~sfx.errors.ConfigError` line.

Which launcher, in order:

1. **torchrun** (or any ``env://`` launcher): ``RANK`` or ``WORLD_SIZE`` is set. Both are then
   required; ``LOCAL_RANK`` / ``LOCAL_WORLD_SIZE`` default to ``RANK`` / ``WORLD_SIZE`` (one node)
   when absent; ``MASTER_ADDR`` and ``MASTER_PORT`` are required when the world has more than one rank.
2. **Slurm srun task**: ``SLURM_PROCID`` *and* ``SLURM_STEP_ID`` (or the older ``SLURM_STEPID``) are
   set. Only srun sets the step variables: the batch script of an ``sbatch`` job also has
   ``SLURM_PROCID=0`` and ``SLURM_NTASKS=N`` but no step id, and a plain ``python -m sfx.train`` there
   is one process, so it stays a single rank. Values, each first-found-wins:

   - rank: ``SLURM_PROCID``; world size: ``SLURM_STEP_NUM_TASKS``, ``SLURM_NTASKS``;
     local rank: ``SLURM_LOCALID``;
   - local world size: this node's entry (``SLURM_NODEID``) of ``SLURM_STEP_TASKS_PER_NODE``,
     ``SLURM_TASKS_PER_NODE`` (compressed, e.g. ``"4(x2),3"``) or ``SLURM_NTASKS_PER_NODE``. The step
     variables come first because an ``srun --ntasks=1`` inside a larger allocation inherits the
     job's ``SLURM_NTASKS_PER_NODE``;
   - master address: ``MASTER_ADDR`` if set, else the first host of ``SLURM_STEP_NODELIST``,
     ``SLURM_JOB_NODELIST`` or ``SLURM_NODELIST`` (task 0 runs on the first node of its step);
   - master port: ``MASTER_PORT`` if set, else :func:`slurm_port` of ``SLURM_JOB_ID``: every task of
     the job computes the same port without talking to the others.
3. **Neither**: a single rank (rank 0 of 1), exactly as before multi-rank support.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping

from sfx.errors import ConfigError

SINGLE = "single"
TORCHRUN = "torchrun"
SLURM = "slurm"

# The deterministic Slurm rendezvous port: SLURM_PORT_BASE + job_id % SLURM_PORT_SPAN, i.e. 20000..29999.
# Below Linux's ephemeral range (32768..60999, where outgoing connections take their local ports, so
# a busy node rarely holds one of these by chance); MASTER_PORT overrides it.
SLURM_PORT_BASE = 20000
SLURM_PORT_SPAN = 10000


@dataclass(frozen=True)
class RankInfo:
    """This process's place in a training: ``rank`` of ``world_size`` overall, ``local_rank`` of
    ``local_world_size`` on this node; ``master_addr:master_port`` is rank 0's rendezvous address
    (None for a single rank when the launcher gave none); ``launcher``: "single", "torchrun" or "slurm"."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    master_addr: str | None = None
    master_port: int | None = None
    launcher: str = SINGLE

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def detect_ranks(environ: Mapping[str, str] | None = None) -> RankInfo:
    """The :class:`RankInfo` of this process from ``environ`` (default ``os.environ``); see the module
    docstring for the rules. Raises :class:`ConfigError` naming the variable on a bad value."""
    env = os.environ if environ is None else environ
    if "RANK" in env or "WORLD_SIZE" in env:
        info = _from_torchrun(env)
    elif "SLURM_PROCID" in env and ("SLURM_STEP_ID" in env or "SLURM_STEPID" in env):
        info = _from_slurm(env)
    else:
        return RankInfo()
    _validate(info)
    return info


def _int_var(env: Mapping[str, str], name: str, *, minimum: int = 0) -> int:
    raw = env[name]
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer (expected an integer >= {minimum})") from None
    if value < minimum:
        raise ConfigError(f"{name}={raw!r} must be an integer >= {minimum}")
    return value


def _require(env: Mapping[str, str], name: str, why: str) -> None:
    if name not in env:
        raise ConfigError(f"{name} is not set but {why}")


def _port(raw: str, name: str) -> int:
    try:
        port = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a port number (expected an integer 1..65535)") from None
    if not 1 <= port <= 65535:
        raise ConfigError(f"{name}={raw!r} is not a port number (expected an integer 1..65535)")
    return port


def _from_torchrun(env: Mapping[str, str]) -> RankInfo:
    for name in ("RANK", "WORLD_SIZE"):
        _require(env, name, "RANK or WORLD_SIZE is (a torchrun launch sets both; unset them for a single rank)")
    world_size = _int_var(env, "WORLD_SIZE", minimum=1)
    rank = _int_var(env, "RANK")
    local_rank = _int_var(env, "LOCAL_RANK") if "LOCAL_RANK" in env else rank
    local_world_size = _int_var(env, "LOCAL_WORLD_SIZE", minimum=1) if "LOCAL_WORLD_SIZE" in env else world_size
    addr = env.get("MASTER_ADDR", "").strip() or None
    port = _port(env["MASTER_PORT"], "MASTER_PORT") if env.get("MASTER_PORT", "").strip() else None
    if world_size > 1 and addr is not None and port is None:
        raise ConfigError(f"MASTER_PORT is not set but WORLD_SIZE={world_size}: ranks need rank 0's "
                          f"port to meet (torchrun sets it; export MASTER_PORT=<free port>)")
    return RankInfo(rank, world_size, local_rank, local_world_size, addr, port, TORCHRUN)


def _from_slurm(env: Mapping[str, str]) -> RankInfo:
    rank = _int_var(env, "SLURM_PROCID")
    ws_name = "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in env else "SLURM_NTASKS"
    _require(env, ws_name, "SLURM_PROCID and SLURM_STEP_ID are (an srun task)")
    world_size = _int_var(env, ws_name, minimum=1)
    local_rank = _int_var(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else (rank if world_size == 1 else None)
    if local_rank is None:
        raise ConfigError("SLURM_LOCALID is not set but SLURM_PROCID and SLURM_STEP_ID are (an srun task): "
                          "cannot tell which GPU of the node is this task's")
    local_world_size = _slurm_local_world_size(env, world_size)

    addr = env.get("MASTER_ADDR", "").strip() or None
    if addr is None:
        for name in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
            if env.get(name, "").strip():
                hosts = expand_hostlist(env[name])
                addr = hosts[0] if hosts else None
                break
    if env.get("MASTER_PORT", "").strip():
        port = _port(env["MASTER_PORT"], "MASTER_PORT")
    elif env.get("SLURM_JOB_ID", "").strip():
        port = slurm_port(_int_var(env, "SLURM_JOB_ID"))
    elif world_size > 1:
        raise ConfigError(f"neither MASTER_PORT nor SLURM_JOB_ID is set but {ws_name}={world_size}: "
                          f"ranks need a common rendezvous port (export MASTER_PORT=<free port>)")
    else:
        port = None
    return RankInfo(rank, world_size, local_rank, local_world_size, addr, port, SLURM)


def _slurm_local_world_size(env: Mapping[str, str], world_size: int) -> int:
    for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"):
        if not env.get(name, "").strip():
            continue
        per_node = parse_tasks_per_node(env[name], name)
        if len(set(per_node)) == 1:
            return per_node[0]
        if "SLURM_NODEID" not in env:
            raise ConfigError(f"{name}={env[name]!r} differs between nodes but SLURM_NODEID is not set: "
                              f"cannot tell how many tasks share this node")
        node = _int_var(env, "SLURM_NODEID")
        if node >= len(per_node):
            raise ConfigError(f"SLURM_NODEID={node} is beyond the {len(per_node)} nodes of {name}={env[name]!r}")
        return per_node[node]
    return world_size  # no per-node count at all: assume every task is on this node


_TASKS_ITEM = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def parse_tasks_per_node(spec: str, name: str = "SLURM_TASKS_PER_NODE") -> list[int]:
    """Slurm's compressed tasks-per-node list, one entry per node: ``"4(x2),3"`` -> ``[4, 4, 3]``."""
    counts: list[int] = []
    for item in spec.strip().split(","):
        m = _TASKS_ITEM.match(item.strip())
        if not m or int(m.group(1)) < 1 or (m.group(2) is not None and int(m.group(2)) < 1):
            raise ConfigError(f"{name}={spec!r} is not a tasks-per-node list "
                              f"(expected counts >= 1 like '4' or '4(x2),3')")
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    return counts


def slurm_port(job_id: int) -> int:
    """The rendezvous port every task of Slurm job ``job_id`` agrees on without talking:
    ``SLURM_PORT_BASE + job_id % SLURM_PORT_SPAN`` (20000..29999). Two jobs whose ids differ by a
    multiple of 10000 get the same port: only a problem if they share rank 0's node (set MASTER_PORT)."""
    return SLURM_PORT_BASE + job_id % SLURM_PORT_SPAN


def _validate(info: RankInfo) -> None:
    src = "WORLD_SIZE/RANK" if info.launcher == TORCHRUN else "SLURM_NTASKS/SLURM_PROCID"
    local_src = "LOCAL_WORLD_SIZE/LOCAL_RANK" if info.launcher == TORCHRUN else "tasks per node/SLURM_LOCALID"
    if info.rank >= info.world_size:
        raise ConfigError(f"rank {info.rank} is not below the world size {info.world_size} ({src}): "
                          f"ranks go from 0 to world size - 1")
    if info.local_rank >= info.local_world_size:
        raise ConfigError(f"local rank {info.local_rank} is not below the local world size "
                          f"{info.local_world_size} ({local_src}): local ranks go from 0 to local world size - 1")
    if info.local_world_size > info.world_size:
        raise ConfigError(f"local world size {info.local_world_size} is larger than the world size "
                          f"{info.world_size} ({local_src} vs {src})")
    if info.is_distributed and info.master_addr is None:
        hint = ("MASTER_ADDR (torchrun sets it)" if info.launcher == TORCHRUN
                else "SLURM_JOB_NODELIST (or MASTER_ADDR)")
        raise ConfigError(f"world size {info.world_size} needs a master address but {hint} is not set: "
                          f"the ranks cannot meet")


# --- Slurm host lists ----------------------------------------------------------------------------------

def _split_top(spec: str) -> list[str]:
    """Split at commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(spec):
        if ch == "[":
            if depth:
                raise ConfigError(f"host list {spec!r} has nested brackets")
            depth = 1
        elif ch == "]":
            if not depth:
                raise ConfigError(f"host list {spec!r} has a ']' without its '['")
            depth = 0
        elif ch == "," and not depth:
            parts.append(spec[start:i])
            start = i + 1
    if depth:
        raise ConfigError(f"host list {spec!r} has a '[' without its ']'")
    parts.append(spec[start:])
    return parts


def _expand_range(body: str, spec: str) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        lo, sep, hi = item.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ConfigError(f"host list {spec!r} has a bad range {item!r} "
                              f"(expected numbers like 1, 01-03 or 1,3,5-6 inside brackets)")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ConfigError(f"host list {spec!r} has a descending range {item!r} (expected low-high)")
        width = len(lo)  # Slurm pads to the width of the range's first number: n[01-10], n[8-11]
        out.extend(str(n).zfill(width) for n in range(first, last + 1))
    return out


def _tokens(part: str) -> list[tuple[str, str | None]]:
    """``"rack[1-2]-node[01-02]"`` -> [("rack", "1-2"), ("-node", "01-02")]; a trailing literal has body None."""
    tokens: list[tuple[str, str | None]] = []
    pos = 0
    while pos < len(part):
        open_at = part.find("[", pos)
        if open_at < 0:
            tokens.append((part[pos:], None))
            break
        close_at = part.index("]", open_at)  # balanced: checked by _split_top
        tokens.append((part[pos:open_at], part[open_at + 1:close_at]))
        pos = close_at + 1
    return tokens


def expand_hostlist(spec: str) -> list[str]:
    """Slurm's compressed host list as host names, in ``scontrol show hostnames`` order:
    ``"node[01-03],b[1,3]"`` -> node01 node02 node03 b1 b3; ``"rack[1-2]-node[01-02]"`` -> the
    cartesian product with the first bracket varying slowest. Zero padding is kept; duplicates are
    kept and empty items skipped (as Slurm does); a malformed list raises :class:`ConfigError`."""
    hosts: list[str] = []
    for part in _split_top(spec.strip()):
        part = part.strip()
        if not part:
            continue
        combos = [""]
        for literal, body in _tokens(part):
            choices = [literal] if body is None else [literal + n for n in _expand_range(body, spec)]
            combos = [c + s for c in combos for s in choices]
        hosts.extend(combos)
    return hosts


# --- devices --------------------------------------------------------------------------------------------

def check_devices(info: RankInfo, device: str, cuda_device_count: int,
                  environ: Mapping[str, str] | None = None) -> str:
    """The torch device string of this rank: ``"cuda:LOCAL_RANK"`` with ``--device=gpu`` where CUDA has
    devices (one GPU per rank: more ranks on this node than GPUs is a :class:`ConfigError` naming both
    numbers), else ``"cpu"`` (``--device=gpu`` without CUDA falls back to the CPU, as a single rank does).

    A rank that sees exactly one GPU through a one-entry ``CUDA_VISIBLE_DEVICES`` (``srun --gpus-per-task=1``,
    or a launcher that binds one GPU per rank) uses that GPU, ``cuda:0``, whatever its local rank."""
    env = os.environ if environ is None else environ
    if device not in ("gpu", "cpu"):
        raise ConfigError(f"--device={device!r} is not a device (expected gpu or cpu)")
    if device == "cpu" or cuda_device_count <= 0:
        return "cpu"
    visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if cuda_device_count == 1 and len(visible) == 1 and info.local_world_size > 1:
        return "cuda:0"  # this rank's own GPU, bound by the launcher
    if info.local_world_size > cuda_device_count:
        raise ConfigError(f"{info.local_world_size} ranks on this node but only {cuda_device_count} GPU(s) "
                          f"visible: one GPU per rank (start at most {cuda_device_count} ranks per node, "
                          f"or --device=cpu)")
    return f"cuda:{info.local_rank}"


def process_group_backend(device: str) -> str:
    """The torch.distributed backend for a rank on ``device`` (as :func:`check_devices` returns it):
    "nccl" for CUDA devices, "gloo" for the CPU."""
    dev = str(device)
    if dev == "cpu":
        return "gloo"
    if dev == "cuda" or dev.startswith("cuda:"):
        return "nccl"
    raise ConfigError(f"device {dev!r} has no process-group backend (expected cpu or cuda[:N])")
