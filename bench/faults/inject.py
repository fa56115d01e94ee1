"""Drive a real sweep (``python -m sfx.runner.run`` on local processes) through a fault schedule, watching it.

:class:`Sweep` launches the runner, samples every half second what runs and how far each training got (for
the invariants afterwards), and :meth:`Sweep.apply` does one :class:`~bench.faults.schedule.Fault` to it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.faults.schedule import Fault, FaultInputError
from bench.faults.targets import Target, all_descendants, discover, doom_games, experiments

REPO = Path(__file__).resolve().parents[2]
MONITOR_SEC = 0.5
CHECKPOINT_GLOB = "checkpoint_p*/checkpoint_*.pth"


@dataclass
class Injected:
    """One fault as it landed: when (seconds since the sweep started), what, at whom, and what happened."""

    at_sec: float
    kind: str
    target: str
    experiment: str | None
    pid: int | None
    note: str = ""
    recovered_by: str = ""
    steps_lost: int | None = None


@dataclass
class Observed:
    """What the monitor saw of one experiment."""

    steps: list[tuple[float, int]] = field(default_factory=list)  # (unix time, env steps) from status.json
    cfg_json: str | None = None  # its first cfg.json
    checkpoints: dict[str, float] = field(default_factory=dict)  # path -> first seen (unix time)


class Sweep:
    """One sweep under faults: ``run_file`` (a run description), launched into ``train_dir`` with
    ``runner_args``; ``run_name``: the run description's name (its folder under ``train_dir``)."""

    def __init__(self, run_file: str, train_dir: Path, run_name: str, runner_args: list[str],
                 log_file: Path) -> None:
        self.run_file, self.train_dir, self.run_dir = run_file, train_dir, train_dir / run_name
        self.runner_args = runner_args
        self.log_file = log_file
        self.runner: subprocess.Popen | None = None
        self.launches = 0
        self.t0 = time.time()
        # every process the sweep ever had: (pid, start time) -> what it was (the start time: a pid reused later
        # by someone else's process is not ours)
        self.seen: dict[tuple[int, float], str] = {}
        self.observed: dict[str, Observed] = {}
        self.injected: list[Injected] = []
        self.truncated: set[str] = set()
        self.shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._monitor = threading.Thread(target=self._watch, daemon=True, name="fault monitor")

    # ------------------------------------------------------------------ the runner

    def command(self) -> list[str]:
        return [sys.executable, "-m", "sfx.runner.run", f"--run={self.run_file}", f"--train_dir={self.train_dir}",
                *self.runner_args]

    def launch(self) -> None:
        """Start the runner (again): the same command every time, as a person would type it again."""
        self.launches += 1
        out = open(self.log_file, "a")  # noqa: SIM115 - the runner's output, for the whole sweep
        out.write(f"\n===== [faults] launch {self.launches} at {time.time() - self.t0:.1f} s: "
                  f"{' '.join(self.command())}\n")
        out.flush()
        self.runner = subprocess.Popen(self.command(), cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL)
        self._saw(self.runner.pid, "runner")
        if not self._monitor.is_alive():
            self._monitor.start()

    def runner_alive(self) -> bool:
        return self.runner is not None and self.runner.poll() is None

    def targets(self) -> list[Target]:
        return discover(self.run_dir, self.runner.pid if self.runner_alive() else None)

    # ------------------------------------------------------------------ watching

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception as e:  # noqa: BLE001 - a sample that failed (a file mid-replace) is the next one
                print(f"[faults] monitor: {e!r}", flush=True)
            self._stop.wait(MONITOR_SEC)

    def sample(self) -> None:
        now = time.time()
        targets = self.targets()
        with self._lock:
            for t in targets + doom_games(targets):
                self._saw(t.pid, t.describe())
            if self.runner is not None:
                for p in all_descendants(self.runner.pid):
                    self._saw(p.pid, "a process of the sweep")
            for exp in experiments(self.run_dir):
                obs = self.observed.setdefault(exp, Observed())
                folder = self.run_dir / exp
                try:
                    status = json.loads((folder / "status.json").read_text())
                    if isinstance(status.get("env_steps"), int):
                        obs.steps.append((now, status["env_steps"]))
                except (OSError, ValueError):
                    pass
                if obs.cfg_json is None and (folder / "cfg.json").is_file():
                    try:
                        obs.cfg_json = (folder / "cfg.json").read_text()
                    except OSError:
                        pass
                for path in folder.glob(CHECKPOINT_GLOB):
                    obs.checkpoints.setdefault(str(path), now)

    def _saw(self, pid: int, what: str) -> None:
        try:
            key = (pid, psutil.Process(pid).create_time())
        except psutil.Error:
            return
        if key not in self.seen or self.seen[key] == "a process of the sweep":
            self.seen[key] = what

    def leftovers(self) -> list[tuple[int, str]]:
        """Processes of the sweep still alive (the same pid and start time as when seen)."""
        out = []
        for (pid, started), what in self.seen.items():
            try:
                p = psutil.Process(pid)
                if p.create_time() == started and p.status() != psutil.STATUS_ZOMBIE:
                    out.append((pid, what))
            except psutil.Error:
                pass
        return out

    # ------------------------------------------------------------------ faults

    def _record(self, kind: str, target: str, experiment: str | None, pid: int | None, note: str = "") -> Injected:
        row = Injected(round(time.time() - self.t0, 1), kind, target, experiment, pid, note)
        self.injected.append(row)
        print(f"[faults] {row.at_sec:7.1f} s  {kind:20s} {target}{f' (pid {pid})' if pid else ''}"
              f"{f': {note}' if note else ''}", flush=True)
        return row

    def apply(self, fault: Fault) -> Injected:
        """Do ``fault`` now; a fault whose target is not running is recorded as skipped (one line)."""
        if fault.kind in ("sigkill", "sigstop"):
            return self._signal(fault)
        if fault.kind == "kill_doom":
            games = doom_games(self.targets())
            if not games:
                return self._record("kill_doom", "doom_game", None, None, "skipped: no ViZDoom game is running")
            t = games[int(fault.pick * len(games))]
            _send(t.pid, signal.SIGKILL)
            return self._record("kill_doom", t.describe(), t.experiment, t.pid)
        if fault.kind == "truncate_checkpoint":
            return self._truncate(fault)
        if fault.kind == "disk_full":
            return self._disk_full(fault)
        if fault.kind == "machine_stop":
            return self.machine_stop()
        raise FaultInputError(f"unknown fault kind {fault.kind!r}")

    def _signal(self, fault: Fault) -> Injected:
        candidates = [t for t in self.targets() if t.role == fault.role]
        if not candidates:
            return self._record(fault.kind, fault.role, None, None, f"skipped: no {fault.role} is running")
        t = candidates[int(fault.pick * len(candidates))]
        if fault.kind == "sigkill":
            _send(t.pid, signal.SIGKILL)
            row = self._record("sigkill", t.describe(), t.experiment, t.pid)
            if t.role == "runner":
                # a runner that dies is started again by whoever looks after the sweep (a person, cron, a
                # login-node service): the same command, which must take the running experiments over
                self.runner.wait()
                time.sleep(2.0)
                self.launch()
                row.recovered_by = "the runner launched again (same command)"
            return row
        _send(t.pid, signal.SIGSTOP)
        row = self._record("sigstop", t.describe(), t.experiment, t.pid, f"SIGCONT after {fault.hold_sec:g} s")
        threading.Timer(fault.hold_sec, _send, (t.pid, signal.SIGCONT)).start()
        return row

    def _truncate(self, fault: Fault) -> Injected:
        paths = sorted(str(p) for p in self.run_dir.glob(f"*/{CHECKPOINT_GLOB}"))
        newest = {}
        for p in paths:  # the newest of each policy folder: the one a resume reads first
            newest[str(Path(p).parent)] = p
        choices = sorted(newest.values())
        if not choices:
            return self._record("truncate_checkpoint", "checkpoint", None, None, "skipped: no checkpoint yet")
        path = Path(choices[int(fault.pick * len(choices))])
        try:
            data = path.read_bytes()
            path.write_bytes(data[: len(data) // 3])
        except OSError as e:
            return self._record("truncate_checkpoint", path.name, None, None, f"skipped: {e.strerror or e}")
        self.truncated.add(str(path))
        exp = path.relative_to(self.run_dir).parts[0]
        return self._record("truncate_checkpoint", f"{exp}/{path.parent.name}/{path.name}", exp, None,
                            f"cut to {len(data) // 3:,} of {len(data):,} bytes")

    def _disk_full(self, fault: Fault) -> Injected:
        if not os.path.ismount(self.train_dir):
            return self._record("disk_full", str(self.train_dir), None, None,
                                "skipped: the train_dir is not a file system of its own (--disk_mb)")
        filler = self.train_dir / ".faults_filler"
        with open(filler, "wb", buffering=0) as f:  # unbuffered: a buffered tail would fail again at close
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError:
                pass
        row = self._record("disk_full", str(self.train_dir), None, None, f"full for {fault.hold_sec:g} s")
        threading.Timer(fault.hold_sec, filler.unlink, kwargs={"missing_ok": True}).start()
        return row

    def machine_stop(self) -> Injected:
        """Every process of the sweep killed at once (a power cut), then the same launch command again."""
        procs = {p.pid: p for p in all_descendants(self.runner.pid)} if self.runner is not None else {}
        for t in self.targets():
            for p in all_descendants(t.pid):
                procs.setdefault(p.pid, p)
        for p in procs.values():
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(list(procs.values()), timeout=10)
        if self.runner is not None:
            self.runner.wait()
        row = self._record("machine_stop", "every process", None, None, f"{len(procs)} processes killed")
        time.sleep(3.0)
        self.launch()
        row.recovered_by = "the same launch command again"
        return row

    # ------------------------------------------------------------------ the end

    def wait(self, timeout_sec: float) -> bool:
        """Wait for the sweep to end (a killed runner is launched again); True when it ended in time."""
        deadline = time.time() + timeout_sec
        while time.time() < deadline:
            if not self.runner_alive():
                unfinished = [e for e in experiments(self.run_dir) if not (self.run_dir / e / "done").is_file()]
                return not unfinished or self._runner_gave_up()
            time.sleep(1.0)
        return False

    def _runner_gave_up(self) -> bool:
        return self.runner is not None and self.runner.returncode is not None

    def close(self) -> None:
        """Stop watching; kill whatever of the sweep is still running (after a timeout)."""
        self._stop.set()
        for pid, _ in self.leftovers():
            _send(pid, signal.SIGCONT)
            _send(pid, signal.SIGKILL)


def _send(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass

