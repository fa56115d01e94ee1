"""--inference=learner: the learner's inference thread and a request queue left locked by a rollout worker
killed inside a ``put`` (a faster_fifo lock taken for good; here a queue whose reads never return). The thread
follows the restart's switch to a spare queue and answers again; a thread that hangs anyway is noticed within
the heartbeat timeout and stops the learner with one line naming it."""

import queue
import threading
import time

import pytest
import torch

from sfx.engine.learner_inference import InferenceHung, LearnerInference, LocalWeights
from sfx.engine.queues import SwitchableQueue


class _LockedQueue:
    """A shared queue whose lock a dead process holds: every read blocks for good (the GIL released)."""

    def get_many(self, block=True, timeout=None, max_messages_to_get=None):
        threading.Event().wait()

    def put_many(self, msgs, *args, **kwargs):
        threading.Event().wait()


class _Queue:
    """A working queue with faster_fifo's blocking ``get_many``."""

    def __init__(self):
        self.q = queue.Queue()

    def put(self, msg, *args, **kwargs):
        self.q.put(msg)

    def get_many(self, block=True, timeout=None, max_messages_to_get=1_000_000):
        first = self.q.get(block=block, timeout=timeout)
        out = [first]
        while True:
            try:
                out.append(self.q.get_nowait())
            except queue.Empty:
                return out


class _Actor:
    """Stands in for the policy worker the thread drives: records the requests it answers; ``hang`` makes
    answering block for good (an answer queue left locked)."""

    def __init__(self, hang=False):
        self.answered = []
        self.hang = hang
        self.model = torch.nn.Linear(2, 2)
        self.should_stop = None

    def start(self):
        pass

    def process(self, msgs):
        if self.hang:
            threading.Event().wait()
        self.answered += msgs


def _inference(actor, requests):
    weights = LocalWeights(actor.model, torch.device("cpu"))
    weights.publish(actor.model, 0)
    return LearnerInference(actor, requests, weights, _Queue(), 0, report_sec=1000.0)


def _wait(condition, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


@pytest.mark.fault("--inference=learner: request queue left locked, then the restart's switch to a spare")
def test_the_inference_thread_follows_the_switch_away_from_a_locked_request_queue():
    made = iter([_LockedQueue(), _Queue()])
    requests = SwitchableQueue(lambda: next(made), spares=1)
    actor = _Actor()
    inference = _inference(actor, requests)
    inference.start(threaded=True)
    try:
        time.sleep(0.3)  # the thread is reading the locked queue
        requests.switch()  # what the rollout worker's restart does (ProcessRuntime.restart)
        requests.put(("request", 7))
        assert _wait(lambda: actor.answered == [("request", 7)]), "the thread still waits on the locked queue"
        inference.check(timeout_sec=5.0)  # and it beats: no hang reported
    finally:
        inference.stop()


@pytest.mark.fault("--inference=learner: the inference thread hangs (answering into a locked queue)")
def test_a_hung_inference_thread_stops_the_learner_within_the_heartbeat_timeout():
    requests = _Queue()
    inference = _inference(_Actor(hang=True), requests)
    inference.start(threaded=True)
    try:
        inference.check(timeout_sec=1.0)
        requests.put(("request", 1))
        t0 = time.time()
        with pytest.raises(InferenceHung, match=r"inference_0 \(the learner's inference thread\) finished no turn for "
                                                r"\d+ s \(--heartbeat_timeout_sec=1\): probably stuck on a queue"):
            while time.time() - t0 < 10:
                inference.check(timeout_sec=1.0)
                time.sleep(0.05)
        assert time.time() - t0 < 3.0  # within the heartbeat timeout (and a poll)
    finally:
        t0 = time.time()
        inference.stop()
        assert time.time() - t0 < 2.0  # the final checkpoint does not wait for the hung thread
