"""Every message that crosses a queue, in one place: its named type, its layout, who sends it to whom.

A message is a tuple whose first element names its kind. Each layout below is a named type
(:class:`typing.NamedTuple`: a tuple, so a plain tuple of the same layout is the same message, and a reader
unpacks either by position); payloads that are dicts are :class:`typing.TypedDict` types (plain dicts). A named
message travels as a plain tuple (:func:`_as_plain_tuple`). The data messages' senders build them as tuple
literals of the type's layout: a plain tuple of a short string, ints and a small array pickles and unpickles in
about 1 us each, a named one in about 5 and 4 (the reduction runs in Python) and is built in 0.8 us instead of
0.2, on every step of every split. Tensors never travel, only indices into shared memory.

Data (hot path; one queue each, read by one component)::

    Request(REQ, worker, split_tag, rows)                 rollout worker -> policy_queues[p]
        (rows: int64 [n, REQUEST_COLUMNS] as bytes, pack_request_rows / request_rows: pickling an
        array costs ~7x as much as its bytes, on every step of every split)
    Act(ACT, [(split_tag, n), ...])                       policy worker  -> rollout_inboxes[w]
    Trajectories(TRAJ, [slot, ...])                       rollout worker -> learner_queues[p]

Control (separate queues, so a control message never waits behind data), all ``Control(kind, payload)``::

    (SHAPING, ShapingUpdate(policy, {name: weight}))      coordinator (PBT) -> rollout_control[w]
    (RESEND, None)                                        coordinator -> rollout_control[w]
        (a policy worker was replaced: ask again for every split still waiting)
    (PBT_SNAPSHOT, SnapshotRequest)                       coordinator (PBT) -> learner_control[p]
    (PBT_UPDATE, ParamsUpdate)                            coordinator (PBT) -> learner_control[p]
    (STOP_LEARNING, status)                               coordinator -> learner_control[p], with several
        ranks: stop at the next iteration every rank's learner agrees on (see RANKS_STOPPED); ``status``
        (one of STOP_STATUSES) is how this rank's stop rule wants the training to end
    (EVALUATE, EvaluateRequest)                           coordinator -> eval_queue (the evaluator), sent
        only while the evaluator is idle (an evaluation due while one runs is skipped and counted)

Reports (every component -> report_queue -> coordinator), all ``Report(kind, who, payload)``::

    (ROLLOUT, worker, RolloutStats)
    (TRAIN, policy, {stats of one training iteration})
    (LEARNER_READY, policy, LearnerReady)
    (CHECKPOINT, policy, CheckpointSaved)
    (CHECKPOINT_FAILED, policy, CheckpointFailed)
    (PBT_SNAPSHOT, policy, SnapshotWritten)               the snapshot asked for is written
    (PBT_APPLIED, policy, ParamsApplied)                  new hyperparameters (and weights) in use
    (ERROR, component_name, traceback_text)
    (STOPPED, component_name, {})                         the component's process is about to exit
    (RANKS_STOPPED, policy, RanksStopped)                 with several ranks: the learners agreed to stop
    (RANK_LOST, component_name, message)                  with several ranks: a collective failed (another
                                                          rank died, hung or was killed); sent before ERROR
    (PERF, component_name, PerfWindow)                    where a component's time went (sfx.engine.perf), every
                                                          few seconds, sent by the runtime loop
    (EVAL_RESULT, policy, EvalResult)                     the evaluator finished one evaluation

``split_tag`` is ``generation * worker_num_splits + split``: a restarted rollout worker, or one
asked to resend, starts a new generation, and answers to another generation's requests are
ignored.

Shared memory read and written without a queue (declared in the wiring, :mod:`sfx.engine.wiring`): each
policy's weights, each policy's ``slot_owners`` (which rollout worker holds each trajectory slot) and the
rank's collection gate (:class:`~sfx.engine.buffers.CollectionGate`).
"""

from __future__ import annotations

from typing import Any, NamedTuple, TypedDict

import numpy as np

# data
REQ = "req"
ACT = "act"
TRAJ = "traj"

# control
SHAPING = "shaping"
RESEND = "resend"
PBT_SNAPSHOT = "pbt_snapshot"
PBT_UPDATE = "pbt_update"
STOP_LEARNING = "stop_learning"
# how a rank's stop rule wants the training to end (STOP_LEARNING's payload), least urgent first: the ranks'
# vote keeps the most urgent, and every rank ends with it (a rank that Ctrl+C or Slurm's warning signal
# stopped makes every rank "interrupted": none may call an unfinished training done)
STOP_STATUSES = ("done", "interrupted")
EVALUATE = "evaluate"

# reports
ROLLOUT = "rollout"
TRAIN = "train"
LEARNER_READY = "learner_ready"
CHECKPOINT = "checkpoint"
CHECKPOINT_FAILED = "checkpoint_failed"
PBT_APPLIED = "pbt_applied"
ERROR = "error"
STOPPED = "stopped"
RANKS_STOPPED = "ranks_stopped"
RANK_LOST = "rank_lost"
EVAL_RESULT = "eval_result"
PERF = "perf"

# Columns of a policy request row (int64): where the agent's current obs and state are (slot, t);
# where a just-truncated episode's bootstrap value goes (trunc slot, trunc t; -1 when none); and
# which agent row holds that episode's final observation and state (agent).
REQ_SLOT, REQ_T, REQ_TRUNC_SLOT, REQ_TRUNC_T, REQ_AGENT = range(5)
REQUEST_COLUMNS = 5


def pack_request_rows(rows: "np.ndarray") -> bytes:
    """Request rows ``int64 [n, REQUEST_COLUMNS]`` as a REQ message carries them (see the module docstring)."""
    return np.ascontiguousarray(rows, dtype=np.int64).tobytes()


def request_rows(packed: bytes) -> "np.ndarray":
    """A REQ message's rows back as ``int64 [n, REQUEST_COLUMNS]`` (a writable copy: torch reads them as tensors)."""
    return np.frombuffer(packed, dtype=np.int64).reshape(-1, REQUEST_COLUMNS).copy()


# --------------------------------------------------------------------------- the messages


def _as_plain_tuple(message: tuple) -> tuple:
    """A named message pickles as the plain tuple of its fields (see the module docstring)."""
    return (tuple, (tuple(message),))


class Request(NamedTuple):
    """Rollout worker ``worker`` asks its policy to act for one split's agents (``rows``: :func:`pack_request_rows`'s
    bytes; ``split_tag``: the split and the worker's generation)."""

    kind: str  # REQ
    worker: int
    split_tag: int
    rows: bytes

    __reduce__ = _as_plain_tuple


class Act(NamedTuple):
    """A policy worker wrote the answers to ``n`` rows of each split ``split_tag`` into the slots: ``answered`` is
    ``[(split_tag, n), ...]``, one message per rollout worker and batch."""

    kind: str  # ACT
    answered: list

    __reduce__ = _as_plain_tuple


class Trajectories(NamedTuple):
    """Finished trajectories, in these slots of the policy's trajectory buffers, for its learner (the dummy
    sampler's random policy worker frees them)."""

    kind: str  # TRAJ
    slots: list

    __reduce__ = _as_plain_tuple


class Control(NamedTuple):
    """A message on a control queue (see the module docstring for each kind's payload)."""

    kind: str  # SHAPING, RESEND, PBT_SNAPSHOT, PBT_UPDATE, STOP_LEARNING or EVALUATE
    payload: Any

    __reduce__ = _as_plain_tuple


class Report(NamedTuple):
    """A message to the coordinator: ``who`` is the policy, the rollout worker's index or the component's name
    (see the module docstring for each kind)."""

    kind: str  # ROLLOUT, TRAIN, LEARNER_READY, CHECKPOINT, ... (the reports above)
    who: Any
    payload: Any

    __reduce__ = _as_plain_tuple


# --------------------------------------------------------------------------- payloads


class ShapingUpdate(NamedTuple):
    """SHAPING's payload: policy ``policy``'s reward shaping is now ``weights`` (name -> weight)."""

    policy: int
    weights: dict

    __reduce__ = _as_plain_tuple


class SnapshotRequest(TypedDict):
    """PBT_SNAPSHOT's control payload: write the learner's weights to ``path``, answering ``request``."""

    request: int
    path: str


class ParamsUpdate(TypedDict):
    """PBT_UPDATE's payload: new hyperparameters, and weights to load (another policy's, ``from_policy``'s)."""

    params: dict
    load_path: str | None
    from_policy: int | None


class EvaluateRequest(TypedDict):
    """EVALUATE's payload: evaluate ``policy``'s current weights, due at ``env_steps``."""

    policy: int
    env_steps: int


class RolloutStats(TypedDict):
    """ROLLOUT's payload: env steps since the last report, finished episodes' stats, env errors since the last
    report and the last one's text."""

    env_steps: int
    episodes: list
    env_errors: int
    env_error: str | None


class LearnerReady(TypedDict):
    """LEARNER_READY's payload: the learner published its first weights, resuming from these counters."""

    env_steps: int
    train_step: int


class CheckpointSaved(TypedDict):
    """CHECKPOINT's payload."""

    path: str
    env_steps: int
    train_step: int


class CheckpointFailed(TypedDict):
    """CHECKPOINT_FAILED's payload."""

    error: str


class SnapshotWritten(TypedDict):
    """PBT_SNAPSHOT's report payload: the snapshot ``request`` asked for is at ``path``."""

    request: int
    path: str


class ParamsApplied(TypedDict):
    """PBT_APPLIED's payload."""

    params: dict
    from_policy: int | None


class RanksStopped(TypedDict):
    """RANKS_STOPPED's payload: ``status`` is the most urgent any rank wanted (one of STOP_STATUSES)."""

    env_steps: int
    weights_match: bool
    status: str


class PerfWindow(TypedDict):
    """PERF's payload (:meth:`sfx.engine.perf.PerfMeter.take`): ``wall`` seconds, ``sec`` per part, ``counts``,
    ``hists``, the mean ``inbox_depth``."""

    wall: float
    sec: dict
    counts: dict
    hists: dict
    inbox_depth: float


class EvalResult(TypedDict, total=False):
    """EVAL_RESULT's payload (``video``: ``{"gif": bytes, "height", "width", "frames"}``, only when one was
    recorded)."""

    env_steps: int
    policy_version: int
    episodes: int
    reward: float
    len: float
    tasks: dict
    sec: float
    best: bool
    video: dict
