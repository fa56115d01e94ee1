"""Helpers shared by the two throughput benchmarks, ``bench.throughput`` and ``bench.bench_throughput``.

Both measure each figure in a fresh Python process: the script runs itself again with
``--child_result=<file>`` (and its own flags), the child writes its result there as JSON, and the
parent reads it back (:func:`run_json_child`, :func:`write_result`). Both print their figures as
aligned plain-text tables (:func:`format_columns`, :func:`fmt_count`). On a GPU machine,
:func:`gpu_info` names the GPU and :class:`GpuMonitor` samples its utilisation while a training runs.
Stopping a training's process group and splitting ``[own flags] -- [training flags]`` are in
:mod:`bench.procs`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def child_env(*, env_modules: tuple[str, ...] = (), unbuffered: bool = False) -> dict[str, str]:
    """This process' environment for a child: the repository importable first, ``env_modules``
    added to ``SFX_EXTRA_ENV_MODULES`` (so every process of the child registers those env
    families), and with ``unbuffered`` its output unbuffered (lines read as they come)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    if env_modules:
        modules = [m for m in env.get("SFX_EXTRA_ENV_MODULES", "").split(",") if m]
        modules += [m for m in env_modules if m not in modules]
        env["SFX_EXTRA_ENV_MODULES"] = ",".join(modules)
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    return env


def write_result(path: str | os.PathLike, result: dict) -> None:
    """In the child: its result for the parent (numpy and torch scalars as floats)."""
    Path(path).write_text(json.dumps(result, default=float))


def tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a log ("" when it cannot be read)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@dataclass
class ChildRun:
    """How a child measurement ended."""

    returncode: int | str  # "timeout" when it was killed at its time limit
    result: dict | None  # what it wrote with write_result; None when it failed or wrote nothing
    wall_sec: float
    log_path: Path


def run_json_child(module: str, own_flags: list[str], extra: list[str], name: str, workdir: Path, *,
                   cwd: Path, env: dict[str, str], timeout: float, verbose: bool = False) -> ChildRun:
    """Run ``python -m module [own_flags] --child_result=<workdir/name.json> -- [extra]`` to the end,
    its output into ``workdir/name.log`` (or, ``verbose``, on this terminal), and read its result back
    (``wall_sec`` added)."""
    result_path, log_path = workdir / f"{name}.json", workdir / f"{name}.log"
    cmd = [sys.executable, "-m", module, *own_flags, f"--child_result={result_path}", "--", *extra]
    started = time.monotonic()
    with open(log_path, "w") as log:
        out = None if verbose else log
        try:
            proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT if out else None,
                                  timeout=timeout)
            rc: int | str = proc.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    wall = time.monotonic() - started
    if rc != 0 or not result_path.exists():
        return ChildRun(rc, None, wall, log_path)
    result = json.loads(result_path.read_text())
    result["wall_sec"] = wall
    return ChildRun(rc, result, wall, log_path)


def fmt_count(x: float) -> str:
    """``12,345`` (a rate or count, rounded), ``-`` for NaN (a figure that could not be measured)."""
    return f"{x:,.0f}" if x == x else "-"


def ratio(a: float, b: float) -> float:
    """``a / b``, NaN when either is missing or ``b`` is not positive."""
    return a / b if a == a and b == b and b > 0 else float("nan")


def format_columns(lines: list[tuple[str, ...]] | list[list[str]], align: str, rule: bool = True) -> str:
    """Rows of cells (the first one the header) as aligned text columns two spaces apart; ``align``
    has one letter per column, ``l`` (left) or ``r`` (right); ``rule`` puts dashes under the header."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(align))]
    out = ["  ".join(cell.rjust(w) if a == "r" else cell.ljust(w) for cell, w, a in zip(line, widths, align)).rstrip()
           for line in lines]
    if rule:
        out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


class GpuMonitor:
    """``nvidia-smi`` sampling the GPU's utilisation and memory once a second while a training runs;
    :meth:`summary` averages the samples of a time window. Without nvidia-smi it records nothing."""

    def __init__(self, enabled: bool) -> None:
        self.samples: list[tuple[float, float, float]] = []  # (monotonic time, utilisation %, memory MiB)
        self.proc = None
        exe = shutil.which("nvidia-smi") if enabled else None
        if exe is None:
            return
        self.proc = subprocess.Popen([exe, "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits",
                                      "-l", "1"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                util, mem = (float(x) for x in line.split(",")[:2])
            except ValueError:
                continue
            self.samples.append((time.monotonic(), util, mem))

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()
            self.thread.join(timeout=5)

    def summary(self, start: float, end: float) -> dict:
        window = [(u, m) for t, u, m in self.samples if start <= t <= end]
        if not window:
            return {}
        return {"gpu_util_mean": sum(u for u, _ in window) / len(window), "gpu_util_max": max(u for u, _ in window),
                "gpu_mem_max_mib": max(m for _, m in window), "gpu_samples": len(window)}


def gpu_info() -> dict:
    """Name, memory and driver of the first CUDA GPU (nvidia-smi, else torch); {} when there is none."""
    exe = shutil.which("nvidia-smi")
    if exe:
        try:
            out = subprocess.run([exe, "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
        except (OSError, subprocess.TimeoutExpired):
            out = []
        if out:
            name, memory, driver = [x.strip() for x in out[0].split(",")[:3]]
            return {"name": name, "memory": memory, "driver": driver, "count": len(out)}
    try:
        import torch

        if torch.cuda.is_available():
            return {"name": torch.cuda.get_device_name(0), "count": torch.cuda.device_count()}
    except ImportError:
        pass
    return {}
