"""Runtimes: run a wiring's components (:class:`~sfx.engine.wiring.ComponentSpec`) through the one
component interface (:mod:`sfx.engine.component`).

- :class:`ProcessRuntime`: every component in its own process (the fast, normal mode), with
  heartbeats, restarts and what a restart must give back;
- :class:`SerialRuntime` (``--serial_mode``): the same component objects driven round-robin in
  this process, for debugging and bit-for-bit determinism.

Both read only the specs (which queue, which control queue, how many threads, restartable or not);
no role names. The loop a component runs, in its process or here: :mod:`sfx.engine.component_loop`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import time
from typing import Any

import torch

from sfx.engine import perf
from sfx.engine.component import ComponentSpec
from sfx.engine.component_loop import component_main, timed_turn
from sfx.engine.process_state import helper_pid, process_state, start_time
from sfx.engine.protocol import PERF, RESEND, Control, Report
from sfx.engine.queues import LockedQueueError, QueuePump, drain, put_or_raise  # noqa: F401 - re-exported
from sfx.engine.shared_arena import SharedArena, check_descriptors, descriptors_passed
from sfx.engine.wiring import Wiring
from sfx.models.precision import apply_tf32

log = logging.getLogger(__name__)

# what multiprocessing says of every forkserver child once the forkserver is gone (popen_forkserver.Popen.poll)
FORKSERVER_LOST_EXITCODE = 255


def give_back_slots(w: Wiring, worker_index: int) -> int:
    """Return to the free pools every trajectory slot a (dead) rollout worker held, per the owners
    table it kept in shared memory; how many. LockedQueueError if a pool stays locked."""
    given_back = 0
    for p, owners in enumerate(w.slot_owners):
        held = (owners == worker_index).nonzero().flatten()
        if len(held):
            owners[held] = -1
            put_or_raise(w.free_slots[p], [int(x) for x in held], f"free slots of policy {p}")
            given_back += len(held)
    if w.gate is not None:
        w.gate.lose(given_back)  # started and never sent: no longer ahead of the learners
    return given_back


def _exit_hung_shutdown() -> None:
    log.error("the shutdown hangs (probably on a queue a killed process left locked): exiting now; the last "
              "checkpoint is kept and the same command resumes")
    logging.shutdown()
    os._exit(1)


class ProcessRuntime:
    """Each component in its own process."""

    def __init__(self, w: Wiring) -> None:
        from sfx.envs.transport import family_for_workers
        # an env registered in __main__ (a notebook, a script's main block) travels to the children by value
        self.w = w = dataclasses.replace(w, env_family=family_for_workers(w.cfg.env))
        # forkserver: children fork from a clean single-threaded server that imported torch and
        # sfx once, so they start in a fraction of a second (spawn re-imports everything per
        # process) and, unlike plain fork, never inherit this process's threads or CUDA state.
        self.ctx = torch.multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(["sfx.engine.runtime", "sfx.models", "sfx.envs", "gymnasium"])
        # a flag in shared memory rather than an Event: an Event is a named POSIX semaphore
        # in /dev/shm that stays there until the garbage collector finalizes it; in the run's arena, so
        # they travel with the rest on its descriptor
        arena = w.arena if w.arena is not None else SharedArena()
        self.stop_flag = arena.tensor(1, torch.uint8)
        self.heartbeats = arena.tensor(len(w.components), torch.float64)
        self.specs: dict[str, ComponentSpec] = {s.name: s for s in w.components}
        self.procs: dict[str, Any] = {}
        self.launched: dict[str, float] = {}
        # each component's process start time (/proc): how a component whose forkserver died is still told
        # alive or dead by its pid (see alive)
        self.start_times: dict[str, int | None] = {}
        self.restarts: dict[str, int] = {}
        # multiprocessing's helpers of this process that were seen dying, by pid (each said once)
        self._helpers_lost: set[int] = set()
        self._start_checked = False  # check_start passed (the coordinator asks before cfg.json is written)

    def start(self) -> None:
        # the coordinator never reads the report queue itself: a killed component may have left it locked
        self.reports = QueuePump(self.w.report_queue)
        # the forkserver sends a child everything it inherits in one message: one line before any start rather
        # than an OSError from inside multiprocessing (the coordinator checks earlier, before cfg.json is written)
        if not self._start_checked:
            self.check_start()
        for spec in self.w.components:
            self._launch(spec)

    def _launch(self, spec: ComponentSpec) -> None:
        i = self.w.components.index(spec)
        self.heartbeats[i] = 0.0  # no beat yet: the startup grace period applies
        p = self.ctx.Process(target=component_main, name=spec.name, args=self.child_args(spec))
        self.launched[spec.name] = time.time()
        p.start()
        self.procs[spec.name] = p
        self.start_times[spec.name] = start_time(p.pid)

    def check_start(self) -> None:
        """ConfigError (one line) when some component's process could not be started: it would receive more
        descriptors than Linux passes to a new process (see :func:`~sfx.engine.shared_arena.check_descriptors`)."""
        # every child receives the whole wiring, so one of each role says it for all
        for spec in {s.role: s for s in self.w.components}.values():
            check_descriptors(spec.name, descriptors_passed(self.child_args(spec)))
        self._start_checked = True

    def child_args(self, spec: ComponentSpec) -> tuple:
        """What the process of ``spec`` receives (pickled by multiprocessing): the whole wiring, whose shared
        tensors and queues all live in one arena (see sfx.engine.shared_arena), so a handful of descriptors."""
        i = self.w.components.index(spec)
        return (self.w, spec, i, self.heartbeats, self.stop_flag, os.getpid(), self.restarts.get(spec.name, 0))

    def step(self) -> list:
        return self.reports.get(timeout=0.1)

    def alive(self, name: str) -> bool:
        """Whether component ``name``'s process still runs. Not ``Process.is_alive`` alone: a forkserver child's
        exit status comes through the forkserver's socket, and once the forkserver is gone (killed) multiprocessing
        says every child exited with code 255 while they all run on, re-parented. So a child said dead with 255
        is asked again by its pid and start time."""
        p = self.procs[name]
        if p.is_alive():
            return True
        return p.exitcode == FORKSERVER_LOST_EXITCODE and self._orphan_alive(name)

    def _orphan_alive(self, name: str) -> bool:
        started = self.start_times.get(name)
        return started is not None and start_time(self.procs[name].pid) == started

    def exitcode(self, name: str) -> int | None:
        """The exit code of a component that ended; None when it is unknown (it ended after its forkserver,
        which alone could tell)."""
        p = self.procs[name]
        if p.exitcode == FORKSERVER_LOST_EXITCODE and self.start_times.get(name) is not None:
            return None
        return p.exitcode

    def _kill(self, name: str) -> None:
        # Process.kill does nothing once multiprocessing believes the process exited (the 255 above)
        if self.alive(name):
            try:
                os.kill(self.procs[name].pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _join(self, name: str, timeout: float) -> None:
        p = self.procs[name]
        p.join(timeout=timeout)
        deadline = time.monotonic() + timeout
        while self.alive(name) and time.monotonic() < deadline:
            time.sleep(0.02)

    def dead_components(self) -> list[str]:
        return [n for n in self.procs if not self.alive(n)]

    def _unfreeze_forkserver(self) -> None:
        """A stopped forkserver (SIGSTOP) would hang the start of a process for as long as it stays stopped, and
        the coordinator with it: it is killed instead, and the launch starts a new one (the components it forked
        run on, told alive by pid: see :meth:`alive`)."""
        from multiprocessing import forkserver

        pid = helper_pid(forkserver, "_forkserver")
        if pid is None or process_state(pid) != b"T":
            return
        log.warning("the forkserver (pid %d) is stopped (SIGSTOP?): killed it, a new one starts the restart", pid)
        self._helpers_lost.add(pid)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 5.0
        while start_time(pid) is not None and time.monotonic() < deadline:
            time.sleep(0.01)

    def lost_helpers(self) -> list[str]:
        """One line for each of multiprocessing's helper processes of the coordinator (the forkserver, the
        resource tracker) found dead since the last call, each started again here: the components they started
        or track run on (see :meth:`alive`)."""
        from multiprocessing import forkserver, resource_tracker

        helpers = (("forkserver", forkserver, "_forkserver"), ("resource tracker", resource_tracker, "_resource_tracker"))
        # every death is seen before anything starts again: the forkserver's start starts a resource tracker too
        lost = [(what, module, attribute, pid) for what, module, attribute in helpers
                if (pid := helper_pid(module, attribute)) is not None and pid not in self._helpers_lost
                and start_time(pid) is None]
        lines = []
        for what, module, attribute, pid in lost:
            self._helpers_lost.add(pid)
            # ensure_running reaps the dead helper and starts a new one (the forkserver: for the next restart)
            module.__dict__[attribute].ensure_running()
            lines.append(f"the {what} (pid {pid}) died: started a new one (pid {helper_pid(module, attribute)}); "
                         f"the components run on")
        return lines

    def startup_limit_sec(self, timeout_sec: float) -> float:
        """How long a component may take to its first heartbeat (imports, env creation and reset, the
        decorrelation delay): --reset_timeout_seconds, at least 3 heartbeat timeouts."""
        cfg = self.w.cfg
        return max(cfg.reset_timeout_seconds, 3 * timeout_sec) + cfg.decorrelate_experience_max_seconds

    def stalled_components(self, timeout_sec: float, now: float | None = None) -> list[str]:
        """Live components with a heartbeat deadline and no beat for ``timeout_sec`` (learners have
        none: one training iteration of a big model can legitimately take long)."""
        now = time.time() if now is None else now
        out = []
        for i, spec in enumerate(self.w.components):
            if not spec.heartbeat_deadline or not self.alive(spec.name):
                continue
            last = float(self.heartbeats[i])
            launched = self.launched[spec.name]
            # until its first beat a component is importing and making envs, which on a loaded machine
            # (or for envs that compile levels) takes much longer than a step: a longer grace period
            limit = timeout_sec if last > launched else self.startup_limit_sec(timeout_sec)
            if now - max(last, launched) > limit:
                out.append(spec.name)
        return out

    def dump_stack(self, name: str) -> None:
        """Ask a live component to write its threads' stacks into the log (faulthandler on SIGUSR1)."""
        p = self.procs[name]
        try:
            os.kill(p.pid, signal.SIGUSR1)
        except ProcessLookupError:
            return
        time.sleep(0.5)

    def restart(self, name: str) -> tuple[int, int]:
        """Kill ``name`` if it still runs, give back the trajectory slots it held, start it again.
        Returns its restart count and the number of slots given back. Every queue the dead process read
        or wrote switches to a fresh spare, a restarted rollout worker starts a new request generation
        and the others resend what they wait for (answers to older requests are ignored);
        LockedQueueError if even a fresh queue cannot be written."""
        spec = self.specs[name]
        # first: a stopped forkserver would also hold back the news of the old process's end
        self._unfreeze_forkserver()
        self._kill(name)
        self._join(name, timeout=10)
        given_back = give_back_slots(self.w, spec.index) if spec.holds_slots else 0
        # The dead process may have left any queue it read or wrote unusable (a lock or a condition
        # variable held forever): every request, answer, control, report and trajectory queue moves to a
        # fresh spare, and every rollout worker asks again for what it was waiting for (old answers are
        # ignored by generation).
        for q in self.w.queues_to_switch():
            q.switch()
        self.restarts[name] = self.restarts.get(name, 0) + 1
        self._launch(spec)
        for i, control in enumerate(self.w.rollout_control):
            if control is not spec.control:
                put_or_raise(control, [Control(RESEND, None)], f"rollout worker {i}'s control queue")
        return self.restarts[name], given_back

    def stop(self, reports_sink, timeout_sec: float = 30.0) -> None:
        """Ask everyone to stop, wait for learners' final checkpoints, then make sure all exited."""
        self.stop_flag[0] = 1
        deadline = time.time() + timeout_sec
        for name, p in self.procs.items():
            while self.alive(name) and time.time() < deadline:
                reports_sink(self.reports.get(timeout=0.05))
                p.join(timeout=0.05)
        for name in self.procs:
            if self.alive(name):
                log.warning("%s did not stop in %.0f s: terminating it", name, timeout_sec)
                self._kill(name)
                self._join(name, timeout=5)
        reports_sink(self.reports.get_rest())
        self.reports.close()

    def pids(self) -> dict[str, int]:
        return {n: p.pid for n, p in self.procs.items()}


class SerialRuntime:
    """The same components, driven round-robin in the calling process (nothing is restarted: an
    exception in a component ends the run)."""

    def __init__(self, w: Wiring, device: torch.device) -> None:
        self.w = w
        self.device = device
        self.specs: dict[str, ComponentSpec] = {s.name: s for s in w.components}
        self.restarts: dict[str, int] = {}
        self.parts: list[tuple[ComponentSpec, Any]] = []
        self.meters: dict[str, perf.PerfMeter] = {}

    def start(self) -> None:
        # one process runs them all: the most threads any component asks (a learner's; the others' small ops
        # stay on one thread below OpenMP's grain size)
        torch.set_num_threads(max((s.threads for s in self.w.components), default=1))
        apply_tf32(self.w.cfg)
        for spec in self.w.components:
            self.meters[spec.name] = perf.PerfMeter(spec.name, self.w.cfg.report_every_sec)
            perf.use(self.meters[spec.name])
            self.parts.append((spec, spec.build(self.w, spec, self.device, 0)))
        for spec, comp in self.parts:  # learners come first in the wiring and publish weights
            perf.use(self.meters[spec.name])
            comp.start()
        perf.use(None)

    def step(self) -> list:
        """One round: every component handles what waits for it. The coordinator checks its stop
        conditions between rounds, so a seeded serial run stops at the same step every time."""
        for spec, comp in self.parts:
            meter = self.meters[spec.name]
            perf.use(meter)
            timed_turn(comp, meter, lambda: drain(spec.inbox), drain(spec.control) if spec.control is not None else [])
            if meter.due():
                self.w.report_queue.put(Report(PERF, spec.name, meter.take()))
        perf.use(None)
        return drain(self.w.report_queue)

    def dead_components(self) -> list[str]:
        return []

    def stalled_components(self, timeout_sec: float, now: float | None = None) -> list[str]:
        return []

    def lost_helpers(self) -> list[str]:
        return []

    def stop(self, reports_sink, timeout_sec: float = 30.0) -> None:
        for spec, comp in self.parts:
            perf.use(self.meters[spec.name])
            comp.finish()
            self.w.report_queue.put(Report(PERF, spec.name, self.meters[spec.name].take()))  # the last, partial window
        perf.use(None)
        reports_sink(drain(self.w.report_queue))

    def pids(self) -> dict[str, int]:
        return {}
