"""What each array task asks Slurm for, checked against the cluster before anything is submitted.

One experiment = one array task = one Slurm job of ``nodes x tasks_per_node`` tasks. With one task
(the default) the job asks for ``cpus`` CPUs and ``gpus`` GPUs on one node. With several tasks each
task is one rank of the training, on one GPU of its node when GPUs are asked for: the job asks for
``tasks_per_node`` tasks of ``cpus`` CPUs each and ``gpus`` (= ``tasks_per_node``) GPUs on each of
``nodes`` nodes, and every task sees all of its node's GPUs (the trainer picks ``cuda:<local rank>``).
"""

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
    nodes: int = 1
    tasks_per_node: int = 1  # with several tasks: cpus is per task, gpus per node (one per task)

    @property
    def tasks(self) -> int:
        """Tasks (ranks) of each experiment's job."""
        return self.nodes * self.tasks_per_node

    def describe(self, array_size: int) -> str:
        timeout = f"{self.timeout_min} min" if self.timeout_min else "the partition's limit"
        parallel = f"%{self.max_parallel}" if self.max_parallel else ""
        layout = f"nodes={self.nodes} ntasks-per-node={self.tasks_per_node} " if self.tasks > 1 else ""
        return (f"partition={self.partition or '<default>'} {layout}cpus-per-task={self.cpus} "
                f"gpus-per-node={self.gpus} time={timeout} signal=USR2@{self.signal_delay_sec}s "
                f"array=0-{array_size - 1}{parallel}")

    def per_node(self) -> str:
        """What one node must offer, with the flags that ask for it (for error messages)."""
        if self.tasks == 1:
            return (f"{self.cpus} CPUs and {self.gpus} GPUs per job (--slurm_gpus_per_job={self.gpus}, "
                    f"--slurm_cpus_per_gpu={self.cpus // max(self.gpus, 1)})")
        gpus = "one GPU per task" if self.gpus else "no GPU, --slurm_gpus_per_job=0"
        return (f"{self.tasks_per_node * self.cpus} CPUs and {self.gpus} GPUs per node ({self.tasks_per_node} tasks "
                f"x {self.cpus} CPUs: --slurm_tasks_per_node={self.tasks_per_node}, "
                f"--slurm_cpus_per_gpu={self.cpus}; {gpus})")


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
    what = res.per_node()
    node_cpus = res.cpus * res.tasks_per_node
    fitting = [n for n in usable if n.cpus >= node_cpus and n.gpus >= res.gpus]
    if not fitting:
        raise RunnerError(f"partition {part.name!r} has no node with {what}; it has {_describe_nodes(usable)}")
    if len(fitting) < res.nodes:
        raise RunnerError(f"--slurm_nodes={res.nodes}: partition {part.name!r} has only {len(fitting)} usable "
                          f"node{'s' if len(fitting) > 1 else ''} with {what}; it has {_describe_nodes(usable)}")
    timeout = res.timeout_min or part.max_time_min or DEFAULT_TIMEOUT_MIN
    if part.max_time_min is not None and timeout > part.max_time_min:
        raise RunnerError(f"--slurm_timeout={timeout} min is above the time limit of partition {part.name!r} "
                          f"({part.max_time_min} min)")
    if res.signal_delay_sec >= timeout * 60:
        raise RunnerError(f"--slurm_signal_delay_sec={res.signal_delay_sec} is not below the job's time limit "
                          f"({timeout} min): the job would be told to stop as soon as it starts")
    return part.name, timeout

