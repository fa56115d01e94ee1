"""Supervision: heartbeats, restarts, and what a restart must give back; the stop rules.

Both are parts of the coordinator loop (:func:`sfx.engine.coordinator.run_loop`): ``handle(reports)``
sees every report, ``check(now)`` returns a :class:`Stop` when the run must end.
"""

from __future__ import annotations

import logging
import signal
import time
from typing import Any, NamedTuple

from sfx.engine.protocol import ERROR, RANK_LOST, RANKS_STOPPED, ROLLOUT, STOP_LEARNING
from sfx.engine.queues import LockedQueueError, put_or_raise
from sfx.engine.stats import reward_target_reached

log = logging.getLogger(__name__)


class Stop(NamedTuple):
    status: str              # "done" | "interrupted" | "failed" | "rank_lost" (another rank is gone: start again)
    message: str | None = None
    level: int = logging.INFO
    # which rule ended a training that was not failing (one of STOP_REASONS); None for failures (the message
    # says what failed)
    reason: str | None = None


# why a training ended, in run_training's result (``stop_reason``) and status.json: the flag whose budget or
# target was reached, a signal (Ctrl+C, SIGTERM), or, with several ranks, another rank's stop
STOP_REASONS = ("train_for_env_steps", "train_for_seconds", "stop_at_reward", "signal", "another_rank")


# an env "keeps crashing" once this many of its steps raised and crashes outnumber finished episodes: a
# crash now and then costs its episode (the env is recreated), but an env that cannot finish an episode
# is a user error (a broken env or an env package sfx does not support) that no restart fixes
ENV_CRASHES_TO_STOP = 10


def last_env_exception(log_file: Any, tail_bytes: int = 256_000) -> str | None:
    """The exception line (``AttributeError: ...``) of the last env crash a rollout worker logged in
    ``sf_log.txt`` (its record is the message and the traceback; the next record starts with ``[``)."""
    try:
        with open(log_file, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - tail_bytes))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    at = text.rfind("its episode is dropped:")
    if at < 0:
        return None
    last = None
    for line in text[at:].splitlines()[1:]:
        if line.startswith("["):
            break
        if line.strip() and not line.startswith((" ", "Traceback", "During handling", "The above exception")):
            last = line.strip()
    return last


class EnvCrashes:
    """Counts the env crashes and finished episodes the rollout workers report (``ROLLOUT``'s
    ``env_errors`` and ``episodes``); :meth:`keep_crashing` says when envs keep crashing, :meth:`message` how."""

    def __init__(self) -> None:
        self.crashes = 0
        self.episodes = 0
        self.exception: str | None = None  # a report's own ``env_error`` text, when rollout workers send one

    def handle(self, payload: dict) -> None:
        self.crashes += payload.get("env_errors", 0)
        self.episodes += len(payload.get("episodes", ()))
        if payload.get("env_error"):
            self.exception = payload["env_error"]

    def keep_crashing(self) -> bool:
        return self.crashes >= ENV_CRASHES_TO_STOP and self.crashes > self.episodes

    def message(self, cfg: Any) -> str:
        from sfx.envs.registry import install_hint
        from sfx.experiment import log_path

        exception = self.exception or last_env_exception(log_path(cfg)) or "an exception"
        hint = install_hint(cfg.env)
        fix = "fix the env (run it alone to see it fail) or install an env package version sfx supports"
        if hint:
            fix += f" ({hint}, in the sfx checkout)"
        return (f"stopping: env {cfg.env} keeps crashing: {self.crashes} env steps raised {exception} and only "
                f"{self.episodes} episodes finished; {fix}. The traceback is in {log_path(cfg)}")


class Supervisor:
    """Components that fail: a component that may not be restarted (a learner) ends the run with its
    last checkpoint kept; the others, when they die or stop beating, are restarted (their trajectory
    slots given back, the queues they used switched to spares), up to ``--max_component_restarts``
    each, and never twice within three heartbeat timeouts (a queue the failed process left locked
    would make every restart fail the same way: only a fresh start of the run helps then). Envs that
    keep crashing (see :data:`ENV_CRASHES_TO_STOP`) end the run too, naming the env and its exception."""

    def __init__(self, cfg: Any, runtime: Any, on_restart=None) -> None:
        self.cfg = cfg
        self.runtime = runtime
        self.on_restart = on_restart or (lambda: None)
        self.errors: list[str] = []
        self.rank_lost: str | None = None
        self.last_restart: dict[str, float] = {}
        self.env_crashes = EnvCrashes()

    def started(self, start: float) -> None:
        pass

    def handle(self, reports: list) -> None:
        for kind, who, payload in reports:
            if kind == ERROR:
                self.errors.append(who)
            elif kind == RANK_LOST:
                self.rank_lost = f"{who}: {payload}"
            elif kind == ROLLOUT:
                self.env_crashes.handle(payload)

    def _restartable(self, name: str) -> bool:
        spec = self.runtime.specs.get(name)
        return spec is not None and spec.restartable

    def check(self, now: float) -> Stop | None:
        fatal = [n for n in self.errors if not self._restartable(n)]
        if fatal and self.rank_lost:
            return Stop("rank_lost", f"stopping: {self.rank_lost}. Rank 0's last checkpoint is kept: start the "
                                     f"training again (every rank resumes from it)", logging.ERROR)
        if fatal:
            return self._failed(f"stopping: {', '.join(fatal)} crashed (see the log above); its last checkpoint is "
                                f"kept and the same command resumes")
        if self.env_crashes.keep_crashing():
            return self._failed(self.env_crashes.message(self.cfg))
        self.errors.clear()  # a restartable component that reported an error exits next and is restarted below
        cfg = self.cfg
        for line in self.runtime.lost_helpers():
            log.warning("%s", line)
        for name in self.runtime.stalled_components(cfg.heartbeat_timeout_sec, now):
            log.error("%s sent no heartbeat for more than %.0f s (--heartbeat_timeout_sec): a dump of its stacks "
                      "follows in sf_log.txt", name, cfg.heartbeat_timeout_sec)
            self.runtime.dump_stack(name)
            failure = self._restart_or_fail(name, f"hung for more than {cfg.heartbeat_timeout_sec:.0f} s")
            if failure:
                return failure
        for name in self.runtime.dead_components():
            code = self.runtime.exitcode(name)
            how = f"exit code {code}" if code is not None else "exit code unknown: it ended after its forkserver"
            if not self._restartable(name):
                return self._failed(f"stopping: {name} died ({how}); its last checkpoint is kept and the "
                                    f"same command resumes")
            failure = self._restart_or_fail(name, f"died ({how})")
            if failure:
                return failure
        return None

    @staticmethod
    def _failed(message: str) -> Stop:
        return Stop("failed", message, logging.ERROR)

    def _restart_or_fail(self, name: str, why: str) -> Stop | None:
        cfg, now = self.cfg, time.time()
        # A process killed or frozen in the middle of a queue operation can leave that queue's lock
        # taken for good, and then whoever uses the queue next hangs too: the restart cannot help,
        # only a fresh start of the run (from the last checkpoint) can.
        window = 3 * cfg.heartbeat_timeout_sec
        recent = [n for n, t in self.last_restart.items() if now - t < window]
        if recent:
            return self._failed(f"stopping: {name} {why} within {window:.0f} s of the restart of {', '.join(recent)}: "
                                f"a queue the failed process was using is probably left locked. The last checkpoint "
                                f"is kept and the same command resumes")
        done_before = self.runtime.restarts.get(name, 0)
        if done_before >= cfg.max_component_restarts:
            return self._failed(f"stopping: {name} {why}, and it was restarted {done_before} times already "
                                f"(--max_component_restarts={cfg.max_component_restarts}); the same command resumes")
        try:
            n, slots_back = self.runtime.restart(name)
        except LockedQueueError as e:
            return self._failed(f"stopping: {name} {why} and could not be restarted: {e}: a queue the failed process "
                                f"was using is probably left locked. The last checkpoint is kept and the same command "
                                f"resumes")
        self.last_restart[name] = time.time()
        self.on_restart()
        if self.runtime.specs[name].holds_slots:
            log.warning("%s %s: restarted it (restart #%d; %d trajectory slots it held were given back, its envs' "
                        "current episodes are lost)", name, why, n, slots_back)
        else:
            log.warning("%s %s: restarted it (restart #%d)", name, why, n)
        return None


class StopRequest:
    """Turns SIGINT / SIGTERM into a flag; a second Ctrl+C stops without waiting."""

    def __init__(self) -> None:
        self.requested: str | None = None
        self.forced = False
        self._old: dict = {}

    def __enter__(self) -> "StopRequest":
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested is not None:
            self.forced = True
        self.requested = signal.Signals(signum).name

    def __exit__(self, *exc) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)


class TrainingStopRules:
    """When a training ends: Ctrl+C / SIGTERM (interrupted), ``--train_for_env_steps`` (once every
    learner has said where it resumed), ``--train_for_seconds``, ``--stop_at_reward``."""

    def __init__(self, cfg: Any, reporter: Any, stop_request: StopRequest) -> None:
        self.cfg = cfg
        self.reporter = reporter
        self.stop_request = stop_request
        self.start = time.time()

    def started(self, start: float) -> None:
        self.start = start

    def handle(self, reports: list) -> None:
        pass

    def check(self, now: float) -> Stop | None:
        cfg = self.cfg
        if self.stop_request.requested:
            return Stop("interrupted", f"{self.stop_request.requested} received: stopping, saving a final checkpoint",
                        reason="signal")
        if self.reporter.all_learners_ready and self.reporter.env_steps() >= cfg.train_for_env_steps:
            return Stop("done", reason="train_for_env_steps")
        if now - self.start >= cfg.train_for_seconds:
            return Stop("done", reason="train_for_seconds")
        reached = reward_target_reached(self.reporter.policies, cfg.stop_at_reward, cfg.stats_avg)
        if reached:
            return Stop("done", f"policy {reached[0]}: average reward {reached[1]:.2f} over its last {cfg.stats_avg} "
                                f"episodes reached --stop_at_reward={cfg.stop_at_reward:g}: done",
                        reason="stop_at_reward")
        return None


# beyond --distributed_timeout_sec, how long a rank waits for its learner to join the others' group
JOIN_GRACE_SEC = 60.0


class RankAgreement:
    """With several ranks, every rank's learner must stop at the same iteration (a learner that left
    would leave the others waiting in a collective). So a stop rule that fires here (done, Ctrl+C) does
    not stop this rank at once: it asks this rank's learner (``STOP_LEARNING``); before every iteration
    the learners vote, all stop together, compare their weights and report ``RANKS_STOPPED``, and then
    each rank stops. A rank whose rules never fire stops when the vote says another rank's did, with the
    most urgent status any rank wanted (``STOP_STATUSES``: one rank interrupted, every rank is). If the
    vote does not come within ``--distributed_timeout_sec`` (another rank dead or hung) this rank stops
    anyway; a second Ctrl+C stops it at once."""

    def __init__(self, cfg: Any, learner_control: tuple, rules: Any, stop_request: StopRequest,
                 learners_ready: Any = lambda: True) -> None:
        self.cfg = cfg
        self.learner_control = learner_control
        self.rules = rules
        self.stop_request = stop_request
        self.learners_ready = learners_ready
        self.wanted: Stop | None = None
        self.asked_at = 0.0
        self.agreed: dict | None = None
        self.start = time.time()

    def started(self, start: float) -> None:
        self.start = start
        self.rules.started(start)

    def handle(self, reports: list) -> None:
        self.rules.handle(reports)
        for kind, _, payload in reports:
            if kind == RANKS_STOPPED:
                self.agreed = payload

    def check(self, now: float) -> Stop | None:
        if self.agreed is not None:
            if not self.agreed["weights_match"]:
                return Stop("failed", "stopping: the ranks' weights differ at the end (a checksum over every "
                                      "tensor); rank 0's checkpoint is kept", logging.ERROR)
            # the most urgent status any rank wanted: a rank whose own rules did not fire (or said "done")
            # ends as the rank that Ctrl+C or Slurm's warning signal stopped, never as finished
            status = self.agreed["status"]
            mine = self.wanted.status if self.wanted is not None else None
            whose = "" if status == mine else f", as another rank's stop wanted ({status})"
            return Stop(status, f"every rank's learner agreed to stop at {self.agreed['env_steps']:,} env steps "
                                f"(all ranks) with equal weights{whose}",
                        reason=self.wanted.reason if status == mine else "another_rank")
        if self.wanted is None and not self.learners_ready() \
                and now - self.start > self.cfg.distributed_timeout_sec + JOIN_GRACE_SEC:
            # a learner stuck joining the group (a peer that never connects) has no heartbeat deadline
            return Stop("rank_lost", f"the learners did not join the other ranks within "
                                     f"{self.cfg.distributed_timeout_sec:.0f} s (--distributed_timeout_sec) + "
                                     f"{JOIN_GRACE_SEC:.0f} s: another rank is gone or unreachable (with gloo "
                                     f"across hosts: is GLOO_SOCKET_IFNAME right?)", logging.ERROR)
        if self.wanted is None:
            wanted = self.rules.check(now)
            if wanted is None:
                return None
            self.wanted, self.asked_at = wanted, now
            if wanted.message:
                log.log(wanted.level, wanted.message)
            log.info("asking the learners of every rank to stop at their next common iteration")
            for q in self.learner_control:
                put_or_raise(q, [(STOP_LEARNING, wanted.status)], "the learner's control queue")
            return None
        if self.stop_request.forced:
            return Stop(self.wanted.status, "second Ctrl+C: stopping this rank without waiting for the others",
                        reason=self.wanted.reason)
        if now - self.asked_at > self.cfg.distributed_timeout_sec:
            # a rank that never votes is dead or hung: unless the user stopped the run, it must start again
            status = self.wanted.status if self.wanted.status == "interrupted" else "rank_lost"
            return Stop(status, f"the learners of the other ranks did not agree to stop within "
                                f"{self.cfg.distributed_timeout_sec:.0f} s (--distributed_timeout_sec): another rank "
                                f"is dead or hung; stopping this rank", logging.WARNING,
                        reason=self.wanted.reason if status == "interrupted" else None)
        return None
