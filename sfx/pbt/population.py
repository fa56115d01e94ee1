"""The population manager: population-based training inside one run of ``--num_policies`` policies.

It lives in the coordinator and talks to the other components only through their queues:

* every ``--pbt_period_env_steps`` of a policy (after ``--pbt_start_mutation``) it ranks the
  population by ``--pbt_target_objective`` averaged over recent episodes;
* a policy in the bottom fraction that is beaten by a clear gap (:func:`select_replacement`)
  *exploits*: the manager asks the winner's learner for a snapshot (``pbt_snapshot``), and when
  it is written tells the loser's learner to load it (weights and optimizer state) with the
  winner's hyperparameters, mutated (``pbt_update``); the loser's counters go on;
* any other policy *explores*: its own hyperparameters, mutated (:func:`mutate`).

Reward-shaping weights of the env (``MultiAgentEnv.get_reward_shaping``) are hyperparameters too,
named ``shaping/<component>``; rollout workers get each policy's weights with a ``shaping``
message and apply them to the agents playing that policy.

Every decision is logged, written to TensorBoard as text (``pbt/decisions``), and the effective
hyperparameters of every policy are scalars ``pbt/<name>`` at every summary. Each policy's current
values are saved to ``policy_NN_cfg.json`` (read back on resume, by this manager and by the learner).

:class:`~sfx.pbt.cluster.ClusterPopulationMember` (PBT across experiments) is a subclass: it decides
differently but resumes, schedules, exploits, explores, saves and records with the methods here.
"""

from __future__ import annotations

import json
import logging
import math
import random
from typing import Any, Callable

from sfx.agents import find_agent
from sfx.engine.protocol import (PBT_SNAPSHOT, PBT_UPDATE, SHAPING, Control, ParamsUpdate, ShapingUpdate,
                                 SnapshotRequest)
from sfx.pbt.mutation import ParamSpec, batch_size_choices, mutate, select_replacement

log = logging.getLogger(__name__)

SHAPING_PREFIX = "shaping/"


def hyperparameter_specs(cfg: Any, shaping: dict[str, float] | None) -> list[ParamSpec]:
    """What PBT mutates for this cfg (the agent declares its hyperparameters; gamma, the batch size and the
    env's reward shaping where asked): bounds wide enough to matter, narrow enough to stay sane."""
    # the agent's own (APPO: learning rate, loss coefficients, gradient and PPO clips)
    specs = [ParamSpec(name, getattr(cfg, name), low, high)
             for name, (low, high) in find_agent(cfg.algo).pbt_hyperparameters(cfg).items()]
    if cfg.pbt_optimize_gamma:
        specs.append(ParamSpec("gamma", cfg.gamma, 0.9, 0.9999, complement=True))
    if cfg.pbt_optimize_batch_size:
        specs.append(ParamSpec("batch_size", cfg.batch_size, choices=batch_size_choices(cfg.batch_size, cfg.rollout)))
    for name, weight in (shaping or {}).items():
        if weight != 0:  # a zero weight has no scale to perturb: leave components the user switched off
            lo, hi = sorted((weight / 10.0, weight * 10.0))
            specs.append(ParamSpec(SHAPING_PREFIX + name, weight, lo, hi))
    return specs


def max_batch_size(cfg: Any) -> int:
    """The largest batch size a policy may reach (trajectory slots are allocated for it)."""
    if cfg.with_pbt and cfg.pbt_optimize_batch_size:
        return max(batch_size_choices(cfg.batch_size, cfg.rollout))
    return cfg.batch_size


class PopulationManager:
    """See the module docstring.

    Args:
        cfg: the run's cfg (the ``pbt_*`` flags, the starting hyperparameters).
        learner_control: per policy, the learner's control queue (``PBT_SNAPSHOT``, ``PBT_UPDATE``).
        rollout_control: per rollout worker, its control queue (``SHAPING`` messages).
        shaping: the env's default reward-shaping weights, or None.
        rng: the manager's random source (seeded from ``cfg.seed`` when given).
        summary: ``(policy, tag, value_or_text, env_steps)`` -> None, writes to TensorBoard.
    """

    def __init__(self, cfg: Any, learner_control: list, rollout_control: list, shaping: dict[str, float] | None,
                 rng: random.Random, summary: Callable[[int, str, Any, int], None]) -> None:
        from sfx.experiment import pbt_dir

        self.cfg = cfg
        self.learner_control = learner_control
        self.rollout_control = rollout_control
        self.rng = rng
        self.summary = summary
        self.n = cfg.num_policies
        self.specs = hyperparameter_specs(cfg, shaping)
        self.snapshot_dir = pbt_dir(cfg)
        start = {s.name: s.default for s in self.specs}
        self.params: list[dict[str, float]] = [dict(start) for _ in range(self.n)]
        self.next_step_at: list[int] = [0] * self.n
        self.pending: dict[int, dict] = {}  # request id -> exploit waiting for the winner's snapshot
        self.busy: set[int] = set()  # policies with an exploit in flight (as loser or winner)
        self.request_counter = 0
        self.history: list[dict] = []  # every decision, for tests and post-mortems

    # ---------------------------------------------------------------- start and resume

    def start(self, env_steps: list[int]) -> None:
        """Restore saved policy params, or diversify a new population; push shaping to the workers."""
        for p in range(self.n):
            # a population of identical members explores nothing at first: every member but the
            # first starts from the flags with each hyperparameter perturbed once
            self._start_policy(p, env_steps[p], diversify=p > 0)
        for p in range(self.n):
            self._send_shaping(p)

    def _start_policy(self, p: int, env_steps: int, diversify: bool) -> None:
        """Policy ``p``'s saved values when it has some, else (``diversify``) the flags' values each
        perturbed once; saved at once, and its first decision scheduled."""
        if not self._resume(p) and diversify:
            new, records = mutate(self.params[p], self.specs, self.rng, 1.0, self.cfg.pbt_perturb_min,
                                  self.cfg.pbt_perturb_max, reset_probability=0.0)
            self.params[p] = new
            self._record(p, "initial", None, records, env_steps, "initial diversity")
            self._send_params(p)
        self._save(p, env_steps)
        self.next_step_at[p] = max(self.cfg.pbt_start_mutation, self._next_period(env_steps))

    def _resume(self, p: int) -> bool:
        """Policy ``p``'s values from its ``policy_NN_cfg.json`` of an earlier life of this
        experiment; False when it has none."""
        from sfx.experiment import policy_cfg_path

        path = policy_cfg_path(self.cfg, p)
        if not path.is_file():
            return False
        saved = json.loads(path.read_text())
        self.params[p].update(saved.get("params", {}))
        self.params[p].update({SHAPING_PREFIX + k: v for k, v in saved.get("reward_shaping", {}).items()})
        log.info("PBT: %s resumed with %s", self.label(p), self._describe(self.params[p]))
        return True

    def _next_period(self, env_steps: int) -> int:
        """The env steps at which the ``--pbt_period_env_steps`` period after ``env_steps`` ends."""
        period = self.cfg.pbt_period_env_steps
        return (env_steps // period + 1) * period

    def _due(self, p: int, env_steps: int) -> bool:
        """Whether policy ``p`` decides now (its period is over and no exploit of it is in flight);
        when it does, its next decision is scheduled."""
        if env_steps < self.next_step_at[p] or p in self.busy:
            return False
        self.next_step_at[p] = self._next_period(env_steps)
        return True

    def _request_snapshot(self, p: int, job: dict, path_of: Callable[[int], Any]) -> None:
        """Ask policy ``p``'s learner to write a snapshot (weights and optimizer state) to
        ``path_of(request id)``; its answer comes to :meth:`on_snapshot`, which gets ``job`` back."""
        self.request_counter += 1
        request = self.request_counter
        self.pending[request] = job
        self.learner_control[p].put(Control(PBT_SNAPSHOT, SnapshotRequest(request=request, path=str(path_of(request)))))

    # ---------------------------------------------------------------- the periodic decision

    def objective(self, stats: Any) -> float:
        """A policy's target objective: the mean of ``--pbt_target_objective`` over its recent
        episodes, else of its reward; NaN before its first finished episode. ``suite/<score>`` (multi-task:
        ``suite/hns_mean``, ``suite/hns_median``, ``suite/hns_mean_capped``) ranks by the suite's score."""
        target = self.cfg.pbt_target_objective
        if target.startswith("suite/"):
            value = stats.suite_scores().get(target[len("suite/"):], math.nan)
        else:
            value = stats.mean(target)
        return stats.mean("reward") if math.isnan(value) else value

    def update(self, policy_stats: list, env_steps: list[int]) -> None:
        """Call often (every coordinator tick): acts for every policy whose period is over."""
        for p in range(self.n):
            if not self._due(p, env_steps[p]):
                continue
            objectives = {q: self.objective(policy_stats[q]) for q in range(self.n)}
            winner, reason = select_replacement(p, objectives, self.cfg.pbt_replace_fraction,
                                                self.cfg.pbt_replace_reward_gap,
                                                self.cfg.pbt_replace_reward_gap_absolute, self.rng)
            if winner is not None and winner not in self.busy:
                self._start_exploit(p, winner, env_steps[p], reason)
            else:
                self._explore(p, env_steps[p], reason)

    def _explore(self, p: int, env_steps: int, reason: str) -> None:
        new, records = mutate(self.params[p], self.specs, self.rng, self.cfg.pbt_mutation_rate,
                              self.cfg.pbt_perturb_min, self.cfg.pbt_perturb_max)
        self._record(p, "explore", None, records, env_steps, f"kept its weights: {reason}")
        if records:
            self.params[p] = new
            self._send_params(p)
            self._send_shaping(p)
            self._save(p, env_steps)

    def _start_exploit(self, p: int, winner: int, env_steps: int, reason: str) -> None:
        self.busy.update((p, winner))
        self._request_snapshot(winner, {"loser": p, "winner": winner, "env_steps": env_steps, "reason": reason},
                               lambda request: self.snapshot_dir / f"policy_{winner:02d}_for_{p:02d}_{request}.pth")
        log.info("PBT: policy %d will copy policy %d (%s); waiting for its snapshot", p, winner, reason)

    def on_snapshot(self, winner: int, payload: dict) -> None:
        """The winner's learner wrote its snapshot: the loser loads it with mutated hyperparameters."""
        job = self.pending.pop(payload["request"], None)
        if job is None:
            return
        self._exploit(job["loser"], winner, dict(self.params[winner]), job["env_steps"], job["reason"],
                      load_path=payload["path"], from_policy=winner)
        self.busy.discard(winner)

    def _exploit(self, p: int, source: Any, copied: dict[str, float], env_steps: int, reason: str,
                 load_path: str, from_policy: int | None) -> None:
        """Policy ``p`` takes ``source``'s hyperparameters ``copied``, mutated, and its learner loads
        the snapshot at ``load_path``; every inherited and mutated value is recorded."""
        new, records = mutate(copied, self.specs, self.rng, self.cfg.pbt_mutation_rate,
                              self.cfg.pbt_perturb_min, self.cfg.pbt_perturb_max)
        inherited = [{"param": k, "old": self.params[p].get(k), "new": v, "how": f"copied from {self.label(source)}"}
                     for k, v in copied.items() if v != self.params[p].get(k)]
        self.params[p] = new
        self._record(p, "exploit", source, inherited + records, env_steps, reason)
        self._send_params(p, load_path=load_path, from_policy=from_policy)
        self._send_shaping(p)
        self._save(p, env_steps)

    def on_applied(self, p: int, payload: dict) -> None:
        """The loser's learner loaded the snapshot and uses the new values."""
        self.busy.discard(p)
        if payload.get("from_policy") is not None:
            log.info("PBT: policy %d now runs policy %d's weights with %s", p, payload["from_policy"],
                     self._describe(self.params[p]))

    # ---------------------------------------------------------------- outputs

    def _send_params(self, p: int, load_path: str | None = None, from_policy: int | None = None) -> None:
        learner_params = {k: v for k, v in self.params[p].items() if not k.startswith(SHAPING_PREFIX)}
        self.learner_control[p].put(Control(PBT_UPDATE, ParamsUpdate(params=learner_params, load_path=load_path,
                                                                     from_policy=from_policy)))

    def shaping_of(self, p: int) -> dict[str, float]:
        return {k[len(SHAPING_PREFIX):]: v for k, v in self.params[p].items() if k.startswith(SHAPING_PREFIX)}

    def _send_shaping(self, p: int) -> None:
        weights = self.shaping_of(p)
        if weights:
            for control in self.rollout_control:
                control.put(Control(SHAPING, ShapingUpdate(p, weights)))

    def _save(self, p: int, env_steps: int) -> None:
        from sfx.experiment import policy_cfg_path
        from sfx.experiment.cfg_io import atomic_write_text

        doc = {"policy": p, "env_steps": env_steps,
               "params": {k: v for k, v in self.params[p].items() if not k.startswith(SHAPING_PREFIX)},
               "reward_shaping": self.shaping_of(p)}
        atomic_write_text(policy_cfg_path(self.cfg, p), json.dumps(doc, indent=2, sort_keys=True) + "\n")

    def _record(self, p: int, kind: str, source: Any, records: list[dict], env_steps: int,
                reason: str) -> None:
        entry = {"policy": p, "kind": kind, "from": source, "env_steps": env_steps, "reason": reason,
                 "changes": records}
        self.history.append(entry)
        changes = "; ".join(f"{r['param']} {_fmt(r['old'])} -> {_fmt(r['new'])} ({r['how']})" for r in records)
        head = f"PBT {kind}: {self.label(p)}" + (f" copies {self.label(source)}" if source is not None else "")
        text = f"{head} at {env_steps:,} env steps ({reason})" + (f": {changes}" if changes else ": nothing mutated")
        log.info(text)
        self.summary(p, "pbt/decisions", text, env_steps)
        if isinstance(source, int):
            self.summary(p, "pbt/copied_from_policy", float(source), env_steps)

    def write_summaries(self, p: int, env_steps: int) -> None:
        """The effective hyperparameters of policy ``p`` as scalars ``pbt/<name>``."""
        for name, value in self.params[p].items():
            self.summary(p, f"pbt/{name}", float(value), env_steps)

    @staticmethod
    def label(who: Any) -> str:
        return f"policy {who}"

    @staticmethod
    def _describe(params: dict) -> str:
        return ", ".join(f"{k}={_fmt(v)}" for k, v in sorted(params.items()))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
