"""Every message that crosses a queue, in one place.

Messages are plain tuples whose first element names their kind (a tuple of a short string, ints
and a small array or dict pickles in a few hundred nanoseconds; tensors never travel, only indices
into shared memory). Each kind below gives its layout and who sends it to whom.

Data (hot path; one queue each, read by one component)::

    (REQ, worker, split_tag, packed rows)                rollout worker -> policy_queues[p]
        (rows: int64 [n, REQUEST_COLUMNS] as bytes, pack_request_rows / request_rows: pickling an
        array costs ~7x as much as its bytes, on every step of every split)
    (ACT, [(split_tag, n), ...])                          policy worker  -> rollout_inboxes[w]
    (TRAJ, [slot, ...])                                   rollout worker -> learner_queues[p]

Control (separate queues, so a control message never waits behind data)::

    (SHAPING, (policy, {name: weight}))                   coordinator (PBT) -> rollout_control[w]
    (RESEND, None)                                        coordinator -> rollout_control[w]
        (a policy worker was replaced: ask again for every split still waiting)
    (PBT_SNAPSHOT, {"request": int, "path": str})         coordinator (PBT) -> learner_control[p]
    (PBT_UPDATE, {"params": dict, "load_path": str|None, "from_policy": int|None})
                                                          coordinator (PBT) -> learner_control[p]
    (STOP_LEARNING, status)                               coordinator -> learner_control[p], with several
        ranks: stop at the next iteration every rank's learner agrees on (see RANKS_STOPPED); ``status``
        (one of STOP_STATUSES) is how this rank's stop rule wants the training to end
    (EVALUATE, {"policy": int, "env_steps": int})         coordinator -> eval_queue (the evaluator), sent
        only while the evaluator is idle (an evaluation due while one runs is skipped and counted)

Reports (every component -> report_queue -> coordinator), all ``(kind, who, payload)``::

    (ROLLOUT, worker, {"env_steps", "episodes": [...], "env_errors"})
    (TRAIN, policy, {stats of one training iteration})
    (LEARNER_READY, policy, {"env_steps", "train_step"})
    (CHECKPOINT, policy, {"path", "env_steps", "train_step"})
    (CHECKPOINT_FAILED, policy, {"error"})
    (PBT_SNAPSHOT, policy, {"request", "path"})           the snapshot asked for is written
    (PBT_APPLIED, policy, {"params", "from_policy"})      new hyperparameters (and weights) in use
    (ERROR, component_name, traceback_text)
    (STOPPED, component_name, {})                         the component's process is about to exit
    (RANKS_STOPPED, policy, {"env_steps", "weights_match", "status"})  with several ranks: the learners agreed
                                                          to stop; ``status``: the most urgent any rank wanted
    (RANK_LOST, component_name, message)                  with several ranks: a collective failed (another
                                                          rank died, hung or was killed); sent before ERROR
    (PERF, component_name, {"wall", "sec": {part: seconds}, "counts", "hists", "inbox_depth"})
                                                          where a component's time went (sfx.engine.perf), every
                                                          few seconds, sent by the runtime loop
    (EVAL_RESULT, policy, {"env_steps", "policy_version", "episodes", "reward", "len", "tasks": {name: reward},
                           "sec", "best": bool[, "video": {"gif": bytes, "height", "width", "frames"}]})
                                                          the evaluator finished one evaluation

``split_tag`` is ``generation * worker_num_splits + split``: a restarted rollout worker, or one
asked to resend, starts a new generation, and answers to another generation's requests are
ignored.
"""

from __future__ import annotations

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
