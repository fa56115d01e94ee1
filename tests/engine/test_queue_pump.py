"""The coordinator reads its report queue through a QueuePump, so that a queue left locked by a
killed writer never hangs it: first the real failure (a faster_fifo queue whose writer is killed
with ``kill -9`` mid-put stays locked), then the pump around such a queue and its spares."""

import multiprocessing
import os
import signal
import threading
import time

import faster_fifo

from sfx.engine.queues import QueuePump, SwitchableQueue, make_process_queue


def _busy_writer(q) -> None:
    msg = ("rollout", 0, {"env_steps": 128, "episodes": [{"reward": 1.0, "len": 20}] * 8})
    while True:
        q.put_many([msg] * 4)


def _reads_within(q, seconds: float) -> bool:
    done = threading.Event()

    def read() -> None:
        try:
            q.get_many(block=False)
        except Exception:
            pass
        done.set()

    threading.Thread(target=read, daemon=True).start()
    return done.wait(seconds)


def locked_queue(max_trials: int = 300):
    """A real faster_fifo queue left locked: a busy writer killed with SIGKILL until one dies holding
    the lock (about one kill in 16 on this machine)."""
    ctx = multiprocessing.get_context("fork")
    for _ in range(max_trials):
        q = faster_fifo.Queue(max_size_bytes=1024 * 1024)
        p = ctx.Process(target=_busy_writer, args=(q,), daemon=True)
        p.start()
        time.sleep(0.02)
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        if not _reads_within(q, 0.5):
            return q
    raise AssertionError(f"no queue was left locked in {max_trials} kills of its writer")


def test_a_writer_killed_mid_put_can_leave_a_queue_locked_and_the_pump_still_answers():
    locked = locked_queue()
    assert not _reads_within(locked, 0.5)  # stays locked: a plain get would hang the coordinator for good
    pump = QueuePump(locked)
    t0 = time.monotonic()
    assert pump.get(timeout=0.2) == []
    assert pump.get_rest(timeout=0.3) == []
    assert time.monotonic() - t0 < 2.0
    pump.close()


class _Locked:
    """Stands for a queue left locked (above): every get blocks for good."""

    def get_many(self, *args, **kwargs):
        threading.Event().wait()


def test_the_pump_follows_a_switch_to_a_spare_and_keeps_draining_the_old_queue():
    sq = SwitchableQueue(make_process_queue, spares=2)
    pump = QueuePump(sq)
    sq.put(("train", 0, {"samples": 1}))
    old = sq.current
    sq.switch()  # a component was restarted: writers move on to a fresh spare
    sq.put(("rollout", 1, {"env_steps": 5}))
    old.put(("stopped", "learner_0", {}))  # a writer that still held the old queue finishes its put
    got = []
    deadline = time.monotonic() + 5
    while len(got) < 3 and time.monotonic() < deadline:
        got += pump.get(timeout=0.1)
    assert sorted(m[0] for m in got) == ["rollout", "stopped", "train"]
    pump.close()


def test_a_stuck_reader_does_not_hold_back_the_spare():
    sq = SwitchableQueue(make_process_queue, spares=1)
    sq.queues[0] = _Locked()
    pump = QueuePump(sq)
    sq.switch()
    sq.put(("learner_ready", 0, {"env_steps": 0, "train_step": 0}))
    t0 = time.monotonic()
    got = pump.get(timeout=0.1) or pump.get_rest(timeout=1.0)
    assert got == [("learner_ready", 0, {"env_steps": 0, "train_step": 0})]
    assert time.monotonic() - t0 < 2.0
    pump.close()
