"""The loop that runs any component (:mod:`sfx.engine.component`): :func:`timed_turn`, one timed turn, which both
runtimes (:mod:`sfx.engine.runtime`) use, and :func:`component_main`, the entry point of a component's own process:
its heartbeat, the stop flag, the coordinator's liveness, its control queue and inbox, its perf reports, and its
last reports however it ends."""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import time
import traceback
from typing import Any, Callable

import torch

from sfx.engine import perf
from sfx.engine.component import ComponentSpec
from sfx.engine.data_parallel import RankLost
from sfx.engine.process_state import alive
from sfx.engine.protocol import ERROR, PERF, RANK_LOST, STOPPED, Report
from sfx.engine.queues import QueuePump, drain
from sfx.engine.wiring import Wiring
from sfx.models.precision import apply_tf32

log = logging.getLogger(__name__)

# a component asks whether the coordinator still lives at most this often (a read of /proc, which
# the rollout workers' per-step stop checks made about 60 times a second each)
PARENT_CHECK_SEC = 0.5
# a component looks at its control queue at most this often (an empty read costs ~3 us, and a
# rollout worker's loop turns thousands of times a second)
CONTROL_POLL_SEC = 0.01
# and samples its inbox's depth at most this often (sfx.engine.perf)
DEPTH_SAMPLE_SEC = 0.1

# the experiment's log, open for the process's life: faulthandler writes every thread's stack into it on SIGUSR1
_stack_file: Any = None


def timed_turn(component: Any, meter: perf.PerfMeter, read, control_msgs: list) -> None:
    """One turn of a component's loop, timed (sfx.engine.perf): control messages, a read of its inbox
    (``read() -> msgs``, the wait timed as ``wait/<component.waiting_for>``), the messages, ``tick()``."""
    clock = time.perf_counter
    if control_msgs:
        t0 = clock()
        component.process(control_msgs)
        meter.add(f"busy/{perf.message_kind(control_msgs)}", clock() - t0)
    waiting_for = component.waiting_for
    t0 = clock()
    msgs = read()
    t1 = clock()
    meter.add(f"wait/{waiting_for}", t1 - t0)
    if msgs:
        component.process(msgs)
        t2 = clock()
        meter.add(f"busy/{perf.message_kind(msgs)}", t2 - t1)
        t1 = t2
    component.tick()
    meter.add("busy/tick", clock() - t1)


def component_main(w: Wiring, spec: ComponentSpec, beat_idx: int, heartbeats_t: torch.Tensor,
                   stop_flag: torch.Tensor, parent_pid: int, incarnation: int = 0) -> None:
    """Entry point of a component's process: build the component, turn its loop until the run stops (or the
    component does), and report how it ended (a crash: ERROR with the traceback; always: the last PERF window and
    STOPPED)."""
    # Ctrl+C and SIGTERM go to the coordinator, which stops everyone in order (final checkpoint)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    name, cfg = spec.name, w.cfg
    _prepare_process(cfg, spec)
    beat, stopping = _liveness(heartbeats_t, stop_flag, beat_idx, parent_pid)
    component = reader = meter = None
    try:
        if w.env_family is not None:
            from sfx.envs.registry import ensure_registered
            ensure_registered(w.env_family)
        beat()
        component = spec.build(w, spec, torch.device(spec.device), incarnation)
        component.should_stop = stopping
        # a component without a heartbeat deadline (a learner) must never hang on a queue a killed
        # process left locked: it reads through a pump that follows the switch to a spare
        reader = QueuePump(spec.inbox) if spec.pump_inbox else None
        # where this component's time goes, reported every few seconds (sfx.engine.perf)
        meter = perf.PerfMeter(name, cfg.report_every_sec)
        perf.use(meter)
        component.start()
        meter.take()  # the windows start with the loop (startup shows in the log, not as busy time)
        _turn_until_stopped(w, spec, component, reader, meter, stopping)
    except Exception as e:  # noqa: BLE001 - whatever ended the component is logged and reported to the coordinator
        log.error("%s crashed:\n%s", name, traceback.format_exc())
        if isinstance(e, RankLost):
            w.report_queue.put(Report(RANK_LOST, name, str(e)))
        w.report_queue.put(Report(ERROR, name, traceback.format_exc()))
    finally:
        _finish(w, name, component, reader, meter)


def _prepare_process(cfg: Any, spec: ComponentSpec) -> None:
    """The process's logging (and its stacks on SIGUSR1, the "what was it doing" of a hang), its torch threads,
    TF32, and with ``--set_workers_cpu_affinity`` the core a pinned component runs on."""
    global _stack_file
    from sfx.experiment import log_path, setup_logging

    setup_logging(cfg, spec.name)
    # SIGUSR1 (sent by the coordinator to a component that stopped beating) writes every thread's
    # stack to the experiment's log
    # (a component is started after its run made the experiment folder; one started without a run, as a test's,
    # makes it: the log's lines wait for the folder in memory, this file cannot)
    log_path(cfg).parent.mkdir(parents=True, exist_ok=True)
    _stack_file = open(log_path(cfg), "a")  # noqa: SIM115 - must stay open for the process's life
    faulthandler.register(signal.SIGUSR1, file=_stack_file, all_threads=True)
    torch.set_num_threads(spec.threads)
    apply_tf32(cfg)
    if spec.pin_core and cfg.set_workers_cpu_affinity and hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[spec.index % len(cores)]})


def _liveness(heartbeats_t: torch.Tensor, stop_flag: torch.Tensor, beat_idx: int,
              parent_pid: int) -> tuple[Callable[[], None], Callable[[], bool]]:
    """``beat()``, which stamps this component's heartbeat, and ``stopping()``, which beats too and says whether
    the run stops (the shared stop flag) or the coordinator is gone (asked of /proc at most every
    :data:`PARENT_CHECK_SEC`): a component whose coordinator was killed saves what it must and exits, leaving no
    orphan."""
    # numpy views of the shared tensors: an element write through numpy costs ~0.1 us, through
    # torch several us, and rollout workers beat at every env step
    heartbeats, stop = heartbeats_t.numpy(), stop_flag.numpy()

    def beat() -> None:
        heartbeats[beat_idx] = time.time()

    parent_checked = [0.0, True]  # [when, alive]

    def stopping() -> bool:
        beat()  # called by every wait loop, including a rollout worker blocked on free slots
        if stop[0]:
            return True
        now = time.monotonic()
        if now - parent_checked[0] >= PARENT_CHECK_SEC:
            parent_checked[:] = [now, alive(parent_pid)]
        return not parent_checked[1]

    return beat, stopping


def _turn_until_stopped(w: Wiring, spec: ComponentSpec, component: Any, reader: QueuePump | None,
                        meter: perf.PerfMeter, stopping: Callable[[], bool]) -> None:
    """The component's loop: its control queue read at most every :data:`CONTROL_POLL_SEC`, its inbox's depth
    sampled every :data:`DEPTH_SAMPLE_SEC`, a :func:`timed_turn`, a PERF report whenever the meter's window is
    due; until the run stops or the component says it stopped."""

    def read() -> list:
        wait = component.read_timeout_sec
        return reader.get(timeout=wait) if reader is not None else drain(spec.inbox, timeout=wait)

    control_due = depth_due = 0.0
    while not stopping():
        control = []
        now = time.monotonic()
        if spec.control is not None and now >= control_due:
            control_due = now + CONTROL_POLL_SEC
            control = drain(spec.control)
        if now >= depth_due:
            depth_due = now + DEPTH_SAMPLE_SEC
            meter.inbox_depth(_depth(spec.inbox))
        timed_turn(component, meter, read, control)
        if meter.due():
            w.report_queue.put(Report(PERF, spec.name, meter.take()))
        if component.stopped:
            break


def _finish(w: Wiring, name: str, component: Any, reader: QueuePump | None, meter: perf.PerfMeter | None) -> None:
    """However the loop ended: the component finishes (a learner saves its checkpoint here, after a crash too),
    then the last, partial PERF window and STOPPED go to the coordinator."""
    if reader is not None:
        reader.close()
    if component is not None:
        try:
            component.finish()
        except Exception:
            log.exception("%s could not finish cleanly", name)
    if meter is not None:
        # the last, partial window: a run shorter than --report_every_sec has no other, and without it the
        # end-of-run table and TensorBoard would miss whatever this component did since its last report
        w.report_queue.put(Report(PERF, name, meter.take()))
    w.report_queue.put(Report(STOPPED, name, {}))


def _depth(q: Any) -> int:
    try:
        return int(q.qsize())
    except Exception:  # noqa: BLE001 - a depth is a diagnostic: a queue that cannot say gives 0
        return 0
