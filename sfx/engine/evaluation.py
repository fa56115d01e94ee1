"""The coordinator's side of evaluation during training: :class:`EvaluationPart` schedules evaluations and
reports their results; :func:`check_eval_env` checks ``--eval_env`` and ``--eval_env_flags`` before anything
starts (:func:`~sfx.engine.evaluator.eval_env_overrides` reads ``--eval_env_flags``). The evaluator component that plays the episodes is
:mod:`sfx.engine.evaluator`."""

from __future__ import annotations

import logging
from typing import Any

from sfx.engine.evaluator import EVALUATOR, eval_cfg, eval_env_overrides
from sfx.engine.protocol import ERROR, EVAL_RESULT, EVALUATE, STOPPED
from sfx.engine.queues import put_or_raise

log = logging.getLogger(__name__)


def check_eval_env(cfg: Any, env_info: Any) -> None:
    """Before anything starts: ``--eval_env_flags`` must be flags of the eval env's family with values it accepts,
    and ``--eval_env`` (with those flags) must make an env with the training env's spaces and agents."""
    from sfx.envs import make_env
    from sfx.envs.registry import find_family
    from sfx.errors import ConfigError

    if cfg.eval_every_env_steps <= 0:
        return
    other_env = bool(cfg.eval_env) and cfg.eval_env != cfg.env
    if not other_env and not eval_env_overrides(cfg):
        return
    ecfg = eval_cfg(cfg)
    family = find_family(ecfg.env)
    if cfg.eval_env_flags and family.validate_fn is not None:
        try:
            family.validate_fn(ecfg)
        except ConfigError as e:
            raise ConfigError(f"--eval_env_flags={cfg.eval_env_flags!r}: {e}") from None
    what = " ".join(f"{flag}={value!r}" for flag, value in (("--eval_env", cfg.eval_env),
                                                            ("--eval_env_flags", cfg.eval_env_flags)) if value)
    try:
        env = make_env(ecfg, {"worker_index": -1, "vector_index": 0, "env_id": -1})
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure to make it is the user's --eval_env / --eval_env_flags
        raise ConfigError(f"{what} could not be made with this run's flags ({type(e).__name__}: {e}); allowed: an "
                          f"env of the same family as --env={cfg.env}") from None
    try:
        got = (env.observation_space, env.action_space, env.num_agents)
    finally:
        env.close()
    want = (env_info.observation_space, env_info.action_space, env_info.num_agents)
    if got != want:
        raise ConfigError(f"{what} has observation space {got[0]}, action space {got[1]}, "
                          f"{got[2]} agent(s); --env={cfg.env} has {want[0]}, {want[1]}, {want[2]}: allowed: an env "
                          f"with the same spaces and number of agents")


class EvaluationPart:
    """The coordinator loop's part for evaluations: asks the evaluator when a policy's evaluation falls
    due (only while it is idle; else the evaluation is skipped and counted), and reports its results."""

    def __init__(self, cfg: Any, eval_queue: Any, reporter: Any) -> None:
        self.cfg = cfg
        self.queue = eval_queue
        self.reporter = reporter
        self.every = int(cfg.eval_every_env_steps)
        self.next_due: list[int] | None = None
        self.busy = False
        self.skipped = [0] * cfg.num_policies
        self.results: list[dict] = []

    def started(self, start: float) -> None:
        pass

    def handle(self, reports: list) -> None:
        for kind, who, payload in reports:
            if kind == EVAL_RESULT:
                self.busy = False
                self._report(int(who), payload)
            elif kind in (ERROR, STOPPED) and who == EVALUATOR:
                self.busy = False  # it died mid-evaluation: the supervisor restarts it, the next one is due as usual

    def _report(self, p: int, r: dict) -> None:
        # the results stay for the run's summary: without the video's bytes (MBs each over a week's run)
        kept = {k: v for k, v in r.items() if k != "video"}
        if "video" in r:
            kept["video"] = {k: v for k, v in r["video"].items() if k != "gif"}
        self.results.append({"policy": p, **kept})
        step = r["env_steps"]
        for tag in ("reward", "len", "policy_version", "episodes", "sec"):
            self.reporter.summary(p, f"eval/{tag}", r[tag], step)
        for name, value in r["tasks"].items():
            self.reporter.summary(p, f"eval/task/{name}/reward", value, step)
        if "video" in r:
            self.reporter.video(p, "eval/video", r["video"], step)
        log.info("evaluation of policy %d at %s env steps (weights version %d): reward %.3f, length %.1f over %d "
                 "episodes in %.1f s%s", p, f"{step:,}", r["policy_version"], r["reward"], r["len"], r["episodes"],
                 r["sec"], " (new best: saved)" if r["best"] else "")

    def check(self, now: float) -> None:
        if not self.reporter.all_learners_ready:
            return None
        steps = [s.env_steps for s in self.reporter.policies]
        if self.next_due is None:  # a resumed run evaluates at the next multiple, not at once
            self.next_due = [(s // self.every + 1) * self.every for s in steps]
        for p, s in enumerate(steps):
            if s < self.next_due[p]:
                continue
            self.next_due[p] = (s // self.every + 1) * self.every
            if self.busy:
                self.skipped[p] += 1
                self.reporter.summary(p, "eval/skipped", self.skipped[p], s)
                log.info("policy %d: evaluation due at %s env steps skipped (the previous one still runs; %d skipped so "
                         "far)", p, f"{s:,}", self.skipped[p])
                continue
            put_or_raise(self.queue, [(EVALUATE, {"policy": p, "env_steps": s})], "the evaluator")
            self.busy = True
        return None
