"""The slurm backend's own flags: ``--slurm_timeout`` and the ``--slurm_sbatch_template`` file."""

from __future__ import annotations

import math
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sfx_runner.errors import RunnerError

# sbatch options the backend sets itself from its flags: a template must not set them too
RESERVED_SBATCH_OPTIONS = {
    "partition": "--slurm_partition", "time": "--slurm_timeout",
    "cpus-per-task": "--slurm_cpus_per_gpu", "cpus-per-gpu": "--slurm_cpus_per_gpu",
    "gpus-per-node": "--slurm_gpus_per_job", "gpus": "--slurm_gpus_per_job", "gpus-per-task": "--slurm_gpus_per_job",
    "signal": "--slurm_signal_delay_sec", "array": "--slurm_max_parallel",
    "nodes": "--slurm_nodes", "ntasks-per-node": "--slurm_tasks_per_node",
    "ntasks": "--slurm_nodes and --slurm_tasks_per_node",
    "output": "--slurm_workdir", "error": "--slurm_workdir", "open-mode": None,
    "job-name": "the run's name",
}


def parse_timeout_min(value: str | int) -> int:
    """A Slurm time limit in whole minutes (0 = "the partition's limit").

    Accepts what ``sbatch --time`` accepts: ``minutes``, ``minutes:seconds``, ``hours:minutes:seconds``,
    ``days-hours``, ``days-hours:minutes``, ``days-hours:minutes:seconds``. Seconds round up.

    Raises:
        RunnerError: anything else.
    """
    text = str(value).strip()
    match = re.fullmatch(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?", text)
    if not match:
        raise RunnerError(f"--slurm_timeout={value!r} is not a time limit; use minutes (120) or "
                          f"[days-]hours:minutes:seconds (0-02:00:00)")
    days, a, b, c = match.groups()
    if days is not None:  # days-hours[:minutes[:seconds]]
        seconds = int(days) * 86400 + int(a) * 3600 + int(b or 0) * 60 + int(c or 0)
    elif c is not None:  # hours:minutes:seconds
        seconds = int(a) * 3600 + int(b) * 60 + int(c)
    elif b is not None:  # minutes:seconds
        seconds = int(a) * 60 + int(b)
    else:  # minutes
        seconds = int(a) * 60
    return math.ceil(seconds / 60)


@dataclass
class SbatchTemplate:
    """What a ``--slurm_sbatch_template`` file adds to every job of the run."""

    directives: dict[str, Any] = field(default_factory=dict)  # option -> value (True: a bare flag)
    setup: list[str] = field(default_factory=list)  # shell lines run before the experiment starts


def parse_sbatch_template(path: str | os.PathLike) -> SbatchTemplate:
    """Read a template file. It may contain:

    * ``#SBATCH --option=value`` or ``#SBATCH --option value`` or ``#SBATCH --flag`` lines (long
      option names): extra sbatch directives, e.g. ``#SBATCH --account=rl``, ``#SBATCH --mem=64G``,
      ``#SBATCH --constraint=a100``, ``#SBATCH --qos=high``, ``#SBATCH --exclusive``;
    * other non-empty lines that are not comments: shell commands run in the job before the
      experiment starts, e.g. ``module load cuda/12.1``, ``source ~/venvs/sfx/bin/activate``,
      ``export NCCL_DEBUG=WARN``;
    * comments (``#`` not followed by ``SBATCH``) and blank lines, ignored.

    The options the backend sets from its own flags (partition, time, cpus, gpus, nodes, tasks, signal,
    array, output, job name) are refused: use the ``--slurm_*`` flags for them.

    Raises:
        RunnerError: a missing file, a short option (``-A``), an option the backend sets itself.
    """
    file = Path(path).expanduser()
    try:
        text = file.read_text()
    except OSError as e:
        raise RunnerError(f"--slurm_sbatch_template={os.fspath(path)!r} cannot be read: {e.strerror}") from None
    template = SbatchTemplate()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        where = f"{file}:{number}"
        if not line:
            continue
        if re.match(r"#\s*SBATCH\b", line):
            words = shlex.split(re.sub(r"^#\s*SBATCH", "", line), comments=True)
            if not words or not words[0].startswith("--") or len(words) > 2:
                raise RunnerError(f"{where}: {line!r}: write one long option per line, e.g. '#SBATCH --account=rl'")
            option, has_value, value = words[0][2:].partition("=")
            if len(words) == 2:
                if has_value or words[1].startswith("-"):
                    raise RunnerError(f"{where}: {line!r}: write one long option per line, e.g. "
                                      f"'#SBATCH --account=rl'")
                has_value, value = True, words[1]
            if not re.fullmatch(r"[a-z][a-z0-9-]*", option):
                raise RunnerError(f"{where}: {line!r}: {option!r} is not an sbatch option name")
            if option in RESERVED_SBATCH_OPTIONS or (option == "gres" and "gpu" in str(value)):
                instead = RESERVED_SBATCH_OPTIONS.get(option, "--slurm_gpus_per_job")
                raise RunnerError(f"{where}: the template sets --{option}, which the slurm runner sets itself"
                                  + (f" (use {instead})" if instead else ""))
            template.directives[option] = value if has_value else True
        elif line.startswith("#"):
            continue
        else:
            template.setup.append(raw.rstrip())
    return template

