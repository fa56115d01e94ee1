"""What each array task asks Slurm for, checked against the cluster before anything is submitted."""

from __future__ import annotations

from dataclasses import dataclass

from sfx_runner.errors import RunnerError
from sfx_runner.slurm.cluster import PartitionInfo, _describe_nodes

DEFAULT_TIMEOUT_MIN = 3 * 24 * 60  # when the partition has no time limit


@dataclass
class JobResources:
    """What each array task asks Slurm for."""

    partition: str | None  # None: the cluster's default partition
    cpus: int
    gpus: int
    timeout_min: int  # 0: the partition's limit (resolved by :func:`check_resources`)
    signal_delay_sec: int
    max_parallel: int  # 0: no limit

    def describe(self, array_size: int) -> str:
        timeout = f"{self.timeout_min} min" if self.timeout_min else "the partition's limit"
        parallel = f"%{self.max_parallel}" if self.max_parallel else ""
        return (f"partition={self.partition or '<default>'} cpus-per-task={self.cpus} gpus-per-node={self.gpus} "
                f"time={timeout} signal=USR2@{self.signal_delay_sec}s array=0-{array_size - 1}{parallel}")


def check_resources(res: JobResources, partitions: dict[str, PartitionInfo]) -> tuple[str, int]:
    """The partition to use and the time limit in minutes, or :class:`RunnerError` when Slurm could
    never run the job (so it would wait in the queue forever)."""
    if res.partition is None:
        defaults = [p for p in partitions.values() if p.default]
        if not defaults:
            raise RunnerError(f"the cluster has no default partition: choose one with --slurm_partition "
                              f"(partitions: {', '.join(sorted(partitions))})")
        part = defaults[0]
    elif res.partition not in partitions:
        names = ", ".join(f"{p.name} (default)" if p.default else p.name for p in partitions.values())
        raise RunnerError(f"--slurm_partition={res.partition!r}: no such partition; partitions: {names}")
    else:
        part = partitions[res.partition]
    if part.available.lower() != "up":
        raise RunnerError(f"partition {part.name!r} is {part.available}: it does not start jobs now")
    usable = [n for n in part.nodes if n.usable]
    if not usable:
        raise RunnerError(f"partition {part.name!r} has no usable node (states: "
                          f"{', '.join(sorted({n.state for n in part.nodes}))})")
    what = (f"{res.cpus} CPUs and {res.gpus} GPUs per job (--slurm_gpus_per_job={res.gpus}, "
            f"--slurm_cpus_per_gpu={res.cpus // max(res.gpus, 1)})")
    if not any(n.cpus >= res.cpus and n.gpus >= res.gpus for n in usable):
        raise RunnerError(f"partition {part.name!r} has no node with {what}; it has {_describe_nodes(usable)}")
    timeout = res.timeout_min or part.max_time_min or DEFAULT_TIMEOUT_MIN
    if part.max_time_min is not None and timeout > part.max_time_min:
        raise RunnerError(f"--slurm_timeout={timeout} min is above the time limit of partition {part.name!r} "
                          f"({part.max_time_min} min)")
    if res.signal_delay_sec >= timeout * 60:
        raise RunnerError(f"--slurm_signal_delay_sec={res.signal_delay_sec} is not below the job's time limit "
                          f"({timeout} min): the job would be told to stop as soon as it starts")
    return part.name, timeout

