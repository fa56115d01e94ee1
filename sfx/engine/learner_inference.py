"""Inference on the learner (``--inference=learner``): SEED RL's central inference as a placement.

The policy's acting forward passes run in its learner's process, on the learner's device, beside training:
a thread reads the policy's request queue and answers the rollout workers exactly as a policy worker does
(it *is* a :class:`~sfx.engine.policy_worker.PolicyWorker`, the same acting code), on an inference copy of the
model. After each optimizer step the learner copies its weights into that copy on the device
(:class:`LocalWeights`): no weights travel through shared memory, and no second process time-slices the GPU.

Why a copy, not the trained model itself: an optimizer step writes the parameters in place; a forward pass
reading them meanwhile would act with a mix of two versions. The copy changes only under the lock the
forward passes hold, so each batch of actions comes from one version, which it records (policy lag stays
exact). On CUDA the thread acts on a stream of its own, ordered against the copy by events.

In ``--serial_mode`` there is no thread: the learner's ``tick`` answers what waits.

A rollout worker killed inside a ``put`` can leave the request queue's lock taken for good. The thread
therefore reads the requests through a :class:`~sfx.engine.queues.QueuePump`, which follows the switch to a
spare queue that the worker's restart makes (a reader stuck on the old queue is abandoned), and it beats: a
thread that finished no turn for ``--heartbeat_timeout_sec`` (stuck answering into a queue left locked, or in
a forward pass that never returns) makes the learner stop the training with one line naming it (the learner
has no deadline of its own, so nothing else would notice).
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from typing import Any

import torch

from sfx.engine import perf
from sfx.engine.buffers import WeightsBuffer
from sfx.engine.protocol import PERF
from sfx.engine.queues import QueuePump, drain

log = logging.getLogger(__name__)

READ_TIMEOUT_SEC = 0.05  # the thread's wait for requests: it also checks for a stop this often


class LocalWeights:
    """The trained weights as the in-process inference sees them. ``publish`` (the learner's call, as for a
    :class:`~sfx.engine.buffers.WeightsBuffer`) copies them into the inference model on the device under the
    lock; ``read_into`` (the policy worker's call) costs nothing: the copy is already there. ``shared``: the
    policy's shared-memory buffer, published too where something else reads it (the evaluator)."""

    def __init__(self, inference_model: torch.nn.Module, device: torch.device,
                 shared: WeightsBuffer | None = None) -> None:
        self.lock = threading.Lock()
        self.version = -1
        self.shared = shared
        self._dst = [t.detach() for t in WeightsBuffer.state_tensors(inference_model)]
        self.device = device
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._copied = torch.cuda.Event() if device.type == "cuda" else None

    def publish(self, model: torch.nn.Module, version: int) -> None:
        src = [t.detach() for t in WeightsBuffer.state_tensors(model)]
        with self.lock, torch.no_grad():
            if self.stream is not None:
                # the inference stream may still be reading the copy: the training stream waits for it
                torch.cuda.current_stream(self.device).wait_stream(self.stream)
            for d, s in zip(self._dst, src):
                d.copy_(s)
            if self._copied is not None:
                self._copied.record(torch.cuda.current_stream(self.device))
            self.version = version
        if self.shared is not None:
            self.shared.publish(model, version)

    def read_into(self, model: torch.nn.Module, current_version: int) -> int:
        return self.version

    def acting(self):
        """The context a batch of actions is computed in: the lock (no copy meanwhile) and, on CUDA, the
        inference stream after the last copy."""
        return _Acting(self)


class _Acting:
    def __init__(self, weights: LocalWeights) -> None:
        self.w = weights
        self._stream_ctx = None

    def __enter__(self) -> None:
        self.w.lock.acquire()
        if self.w.stream is not None:
            self.w.stream.wait_event(self.w._copied)
            self._stream_ctx = torch.cuda.stream(self.w.stream)
            self._stream_ctx.__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            if self._stream_ctx is not None:
                self._stream_ctx.__exit__(*exc)
        finally:
            self.w.lock.release()


class LearnerInference:
    """The acting side of ``--inference=learner`` (see the module docstring): ``actor`` answers the requests
    waiting on ``requests``; :meth:`start` runs it on a thread (or, ``threaded=False``, :meth:`poll` answers
    what waits, for serial mode). Its time is reported as component ``inference_<policy>``."""

    def __init__(self, actor: Any, requests: Any, weights: LocalWeights, report_queue: Any, policy: int,
                 report_sec: float) -> None:
        self.actor = actor
        self.requests = requests
        self.weights = weights
        self.report_queue = report_queue
        self.name = f"inference_{policy}"
        self.meter = perf.PerfMeter(self.name, report_sec)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pump: QueuePump | None = None
        self.error: str | None = None
        self.last_turn = time.monotonic()  # the thread's heartbeat: when it last finished a turn
        actor.should_stop = self._stop.is_set

    def start(self, threaded: bool) -> None:
        """After the learner's first publish (the actor acts with version >= 0)."""
        self.actor.start()
        self.meter.take()
        if threaded:
            self._pump = QueuePump(self.requests)
            self.last_turn = time.monotonic()
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def poll(self, timeout: float = 0.0) -> None:
        """Answer what waits (at most ``timeout`` for the first request)."""
        clock = time.perf_counter
        caller = perf.current()  # serial mode: the learner's meter; the actor's parts are inference's
        perf.use(self.meter)
        try:
            t0 = clock()
            msgs = self._pump.get(timeout=timeout) if self._pump is not None else drain(self.requests, timeout=timeout)
            t1 = clock()
            self.meter.add("wait/requests", t1 - t0)
            if msgs:
                with self.weights.acting():
                    self.actor.process(msgs)
                self.meter.add(f"busy/{perf.message_kind(msgs)}", clock() - t1)
            if self.meter.due():
                self.report_queue.put((PERF, self.name, self.meter.take()))
        finally:
            perf.use(caller)
        self.last_turn = time.monotonic()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.poll(READ_TIMEOUT_SEC)
        except Exception:  # noqa: BLE001 - handed to the learner, which raises it in its own loop
            self.error = traceback.format_exc()
            log.error("%s crashed:\n%s", self.name, self.error)

    def check(self, timeout_sec: float | None = None) -> None:
        """Raise in the learner's loop what the thread died of, or (``timeout_sec``) that it finished no turn
        for that long: it hangs, and the rollout workers wait for its answers for good."""
        if self.error is not None:
            raise RuntimeError(f"{self.name} (the learner's inference thread) crashed:\n{self.error}")
        if self._thread is None or timeout_sec is None or self._stop.is_set():
            return
        quiet = time.monotonic() - self.last_turn
        if quiet > timeout_sec:
            raise InferenceHung(f"{self.name} (the learner's inference thread) finished no turn for {quiet:.0f} s "
                                f"(--heartbeat_timeout_sec={timeout_sec:g}): probably stuck on a queue a killed process "
                                f"left locked; stopping the training with its last checkpoint")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            # a hung thread stays hung (a daemon): the learner's final checkpoint must not wait for it
            self._thread.join(timeout=0.5 if self.last_turn < time.monotonic() - 1.0 else 10)
        if self._pump is not None:
            self._pump.close()
        if self._thread is None or not self._thread.is_alive():
            # the last, partial window (the thread no longer adds to the meter): see sfx.engine.runtime
            self.report_queue.put((PERF, self.name, self.meter.take()))


class InferenceHung(RuntimeError):
    """The learner's inference thread stopped making progress (see :meth:`LearnerInference.check`)."""
