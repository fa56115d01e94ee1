"""PBT across experiments: each experiment of a sweep is one member of a population whose only
meeting point is a shared folder (``--pbt_population_dir``), so members can run anywhere: separate
Slurm jobs, machines, requeued jobs.

Layout of the population folder::

    <pbt_population_dir>/<member>/member.json   objective, env steps, hyperparameters, time, experiment folder
    <pbt_population_dir>/<member>/snapshot.pth  weights + optimizer state at that publication

Every ``--pbt_period_env_steps`` (after ``--pbt_start_mutation``) a member asks its learner for a
snapshot, publishes it with its objective (both written atomically: a reader sees the previous
publication or the new one, never half a file), then reads the other members' publications.
Members silent for more than ``--pbt_member_stale_sec`` (crashed, preempted, queued) are left
out until they publish again. The decision is the in-run one (:func:`select_replacement`,
:func:`mutate`): a member in the bottom fraction copies a better member's snapshot and mutated
hyperparameters, any other explores. A member that is killed loses nothing: its own hyperparameters
are in its experiment folder (``policy_00_cfg.json``) and its publication stays for the others.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

from sfx.experiment.cfg_io import atomic_write_text
from sfx.pbt.mutation import select_replacement
from sfx.pbt.population import PopulationManager


def read_members(population_dir: Path, stale_sec: float, now: float | None = None) -> dict[str, dict]:
    """Every member's last publication that is not older than ``stale_sec`` (unreadable ones are
    skipped: a member may be writing its first one)."""
    now = time.time() if now is None else now
    members = {}
    for path in sorted(Path(population_dir).glob("*/member.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if now - float(doc.get("updated", 0)) <= stale_sec:
            members[path.parent.name] = doc
    return members


class ClusterPopulationMember(PopulationManager):
    """The one policy of this experiment as a member of a population spread over experiments."""

    def __init__(self, cfg: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(cfg, *args, **kwargs)
        self.name = cfg.pbt_member_name or cfg.experiment
        self.population_dir = Path(cfg.pbt_population_dir).expanduser()
        self.member_dir = self.population_dir / self.name
        self.member_dir.mkdir(parents=True, exist_ok=True)
        self.objective_now = math.nan

    def label(self, who: Any) -> str:
        return f"member {self.name}" if who == 0 else f"member {who}"

    def start(self, env_steps: list[int]) -> None:
        """Own hyperparameters from a previous life of this experiment; no initial perturbation
        (members differ by their own flags, e.g. a runner grid)."""
        self._start_policy(0, env_steps[0], diversify=False)
        self._send_shaping(0)

    def update(self, policy_stats: list, env_steps: list[int]) -> None:
        """Every period: ask our learner for the snapshot to publish (the decision follows in
        :meth:`on_snapshot`)."""
        if not self._due(0, env_steps[0]):
            return
        self.objective_now = self.objective(policy_stats[0])
        self.busy.add(0)
        self._request_snapshot(0, {"env_steps": env_steps[0]}, lambda request: self.member_dir / "snapshot.pth")

    def on_snapshot(self, who: int, payload: dict) -> None:
        """Our snapshot is published: publish the objective too, then exploit or explore."""
        job = self.pending.pop(payload["request"], None)
        if job is None:
            return
        env_steps = job["env_steps"]
        doc = {"member": self.name, "objective": None if math.isnan(self.objective_now) else self.objective_now,
               "env_steps": env_steps, "params": self.params[0], "updated": time.time(),
               "experiment_dir": os.path.abspath(os.path.join(self.cfg.train_dir, self.cfg.experiment))}
        atomic_write_text(self.member_dir / "member.json", json.dumps(doc, indent=2, sort_keys=True) + "\n")

        members = read_members(self.population_dir, self.cfg.pbt_member_stale_sec)
        objectives = {name: (math.nan if m.get("objective") is None else float(m["objective"]))
                      for name, m in members.items()}
        objectives[self.name] = objectives.get(self.name, math.nan)
        winner, reason = select_replacement(self.name, objectives, self.cfg.pbt_replace_fraction,
                                            self.cfg.pbt_replace_reward_gap,
                                            self.cfg.pbt_replace_reward_gap_absolute, self.rng, noun="member")
        reason = f"{reason}; {len(members)} live members"
        if winner is not None:
            local = self.snapshot_dir / f"from_{winner}.pth"
            try:
                local.parent.mkdir(parents=True, exist_ok=True)
                # a copy: the winner may publish again (replace its file) while our learner loads
                shutil.copyfile(self.population_dir / winner / "snapshot.pth", local)
            except OSError as e:
                self.busy.discard(0)
                self._explore(0, env_steps, f"member {winner}'s snapshot could not be read ({e}); {reason}")
                return
            self._exploit(0, winner, dict(members[winner]["params"]), env_steps, reason, load_path=str(local),
                          from_policy=None)
        else:
            self.busy.discard(0)
            self._explore(0, env_steps, reason)
