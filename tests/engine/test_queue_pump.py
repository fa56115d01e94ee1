"""The coordinator reads its report queue through a QueuePump, so that a queue left locked by a
killed writer never hangs it: first the real failure (a faster_fifo queue whose writer is killed
with ``kill -9`` mid-put stays locked), then the pump around such a queue and its spares."""

import multiprocessing
import os
import random
import signal
import threading
import time

import faster_fifo

from sfx.engine.queues import QueuePump, SwitchableQueue, make_process_queue


def _busy_writer(q, started) -> None:
    """Puts and takes back 100 KB messages for good, so that it is almost always inside the queue's
    lock (copying a message in or out) and never parked on a full queue, where a kill would land
    with the lock released."""
    msg = b"x" * 100_000
    q.put(msg)
    q.get()
    started.set()
    while True:
        q.put_many([msg] * 4)
        q.get_many(max_messages_to_get=4)


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


def locked_queue(max_trials: int = 200):
    """A real faster_fifo queue left locked: a busy writer killed with SIGKILL at a random moment
    until one dies holding the lock (more than half of the kills on this machine, 2026-12-02; the
    first version, small messages into a queue nobody read, locked it in 1 kill of 60 here and in
    none of 300 on CI's machine: the queue filled and the writer waited with the lock released)."""
    ctx = multiprocessing.get_context("fork")
    rng = random.Random(0)
    for _ in range(max_trials):
        q = faster_fifo.Queue(max_size_bytes=8 * 1024 * 1024)
        started = ctx.Event()
        p = ctx.Process(target=_busy_writer, args=(q, started), daemon=True)
        p.start()
        assert started.wait(30), "the writer process did not start"
        time.sleep(rng.uniform(0.001, 0.01))
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
