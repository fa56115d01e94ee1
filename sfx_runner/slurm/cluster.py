"""The cluster as ``sinfo`` reports it: partitions, their nodes, and the Slurm client commands."""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass, field

from sfx_runner.errors import RunnerError
from sfx_runner.slurm.flags import parse_timeout_min

# node states in which a node takes no job until an administrator acts (a powered-down or
# reserved node does come back by itself)
UNUSABLE_NODE_STATES = ("down", "drain", "fail", "inval", "future", "unknown", "not_responding")


@dataclass
class NodeInfo:
    """One node of a partition, as ``sinfo`` reports it."""

    name: str
    cpus: int
    gpus: int
    state: str

    @property
    def usable(self) -> bool:
        state = self.state.lower().rstrip("*~#!%$@^-+")  # suffixes: not responding, powered off, ...
        return not any(state.startswith(s) for s in UNUSABLE_NODE_STATES)


@dataclass
class PartitionInfo:
    """A partition: whether it is the default, whether it takes jobs, its time limit and nodes."""

    name: str
    default: bool
    available: str
    max_time_min: int | None  # None: no limit
    nodes: list[NodeInfo] = field(default_factory=list)


def _run(cmd: list[str], what: str) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise RunnerError(f"{cmd[0]} not found: the slurm runner needs the Slurm client commands (sbatch, "
                          f"sinfo, squeue, sacct) on PATH, i.e. a Slurm login node") from None
    except subprocess.TimeoutExpired:
        raise RunnerError(f"{what}: '{shlex.join(cmd)}' did not answer within 60 s (is slurmctld up?)") from None
    if proc.returncode != 0:
        raise RunnerError(f"{what}: '{shlex.join(cmd)}' failed (exit {proc.returncode}): "
                          f"{(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


def gpus_in_gres(gres: str) -> int:
    """The number of GPUs in a Slurm GRES string: ``gpu:2`` -> 2, ``gpu:a100:4(S:0-1),mps:100`` -> 4,
    ``(null)`` -> 0."""
    return sum(int(n) for n in re.findall(r"(?:^|,)gpu(?::[^:,()]+)?:(\d+)", gres))


def query_partitions() -> dict[str, PartitionInfo]:
    """Every partition of the cluster with its nodes (one ``sinfo`` call)."""
    out = _run(["sinfo", "--noheader", "--Node", "--format=%P|%a|%l|%N|%c|%G|%T"], "asking Slurm for its partitions")
    partitions: dict[str, PartitionInfo] = {}
    for line in out.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 7:
            continue
        name, avail, limit, node, cpus, gres, state = fields
        default = name.endswith("*")
        name = name.rstrip("*")
        part = partitions.get(name)
        if part is None:
            max_time = None if limit.strip().lower() in ("infinite", "unlimited", "n/a") else parse_timeout_min(limit)
            part = partitions[name] = PartitionInfo(name, default, avail, max_time)
        cpu_count = int(re.sub(r"\D.*", "", cpus) or 0)
        part.nodes.append(NodeInfo(node, cpu_count, gpus_in_gres(gres), state))
    if not partitions:
        raise RunnerError("Slurm reports no partition at all (sinfo printed nothing)")
    return partitions


def _describe_nodes(nodes: list[NodeInfo]) -> str:
    kinds: dict[tuple[int, int], int] = {}
    for n in nodes:
        kinds[(n.cpus, n.gpus)] = kinds.get((n.cpus, n.gpus), 0) + 1
    return ", ".join(f"{count} node{'s' if count > 1 else ''} with {cpus} CPUs and {gpus} GPUs"
                     for (cpus, gpus), count in sorted(kinds.items(), reverse=True))

