"""What must hold after a sweep under faults, per experiment (checked from its files and logs alone), and the
report: a table of every fault (target, time, what recovered it, env steps lost) and every invariant."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from bench.faults.inject import Sweep

LOG_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]\[([^\]]+)\] (.*)$")
RESUMED = re.compile(r"policy (\d+) resumed at train step (\d+), (\d+) env steps")
CHECKPOINT_NAME = re.compile(r"checkpoint_(\d+)_(\d+)\.pth$")


@dataclass
class Verdict:
    """One experiment's invariants: ``failures`` (each one line) empty when all hold; ``resumes``: (unix time,
    policy, env steps resumed at, newest intact checkpoint's env steps seen before)."""

    experiment: str
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    resumes: list[tuple[float, int, int, int | None]] = field(default_factory=list)


def log_lines(path: Path) -> list[tuple[float, str, str]]:
    """(unix time, process name, message) of each record of an sfx log (continuation lines are skipped)."""
    out = []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        m = LOG_TIME.match(line)
        if m:
            t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            out.append((t, m.group(2), m.group(3)))
    return out


def _load(path: str) -> str | None:
    import torch

    try:
        torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any reason a checkpoint does not load is the finding
        return f"{type(e).__name__}: {e}"[:200]
    return None


def check_experiment(sweep: Sweep, exp: str) -> Verdict:
    v = Verdict(exp)
    folder = sweep.run_dir / exp
    obs = sweep.observed.get(exp)
    try:
        cfg = json.loads((folder / "cfg.json").read_text())
    except (OSError, ValueError) as e:
        v.failures.append(f"cfg.json unreadable: {e}")
        return v
    # budget
    done = folder / "done"
    if not done.is_file():
        v.failures.append("its budget was not reached: no done file")
    else:
        text = done.read_text().strip()
        steps = int(text.split("=")[1]) if text.startswith("env_steps=") else -1
        if steps < 0:
            v.failures.append(f"its done file does not say its env steps: {text!r}")
        elif steps < cfg["train_for_env_steps"]:
            v.failures.append(f"done at {steps:,} env steps, below --train_for_env_steps={cfg['train_for_env_steps']:,}")
    # cfg.json as first written
    # (but its provenance: every start of the training writes its own, sfx.experiment.save_cfg)
    if obs is not None and obs.cfg_json is not None:
        first = json.loads(obs.cfg_json)
        changed = sorted(k for k in set(first) | set(cfg) if k != "provenance" and first.get(k) != cfg.get(k))
        if changed:
            v.failures.append(f"cfg.json changed during the sweep: {', '.join(changed)}")
        if not isinstance(cfg.get("provenance"), dict) or "git" not in cfg["provenance"]:
            v.failures.append("cfg.json has no provenance (git state, packages)")
    # every remaining checkpoint loads (the ones the injector cut are expected not to)
    for path in sorted(folder.glob("checkpoint_p*/checkpoint_*.pth")):
        if str(path) in sweep.truncated:
            v.notes.append(f"{path.parent.name}/{path.name}: cut by the injector, still there (never loaded)")
            continue
        error = _load(str(path))
        if error:
            v.failures.append(f"{path.parent.name}/{path.name} does not load: {error}")
    # resumes: from the newest intact checkpoint the monitor saw before, never further back
    seen = obs.checkpoints if obs is not None else {}
    for t, _, msg in log_lines(folder / "sf_log.txt"):
        m = RESUMED.search(msg)
        if not m:
            continue
        policy, steps = int(m.group(1)), int(m.group(3))
        before = [int(CHECKPOINT_NAME.search(p).group(2)) for p, first in seen.items()
                  if f"checkpoint_p{policy}/" in p and first <= t and p not in sweep.truncated]
        expected = max(before) if before else None
        v.resumes.append((t, policy, steps, expected))
        if expected is not None and steps < expected:
            v.failures.append(f"policy {policy} resumed at {steps:,} env steps, behind its newest intact checkpoint "
                              f"({expected:,})")
    # PBT's member files agree with the policies' checkpoints
    if cfg.get("with_pbt"):
        for p in range(cfg["num_policies"]):
            found = folder / f"policy_{p:02d}_cfg.json"  # sfx.experiment.policy_cfg_path
            if not found.is_file():
                v.notes.append(f"policy {p}: no PBT member file (no mutation yet)")
                continue
            try:
                doc = json.loads(found.read_text())
            except ValueError as e:
                v.failures.append(f"{found.name} is not JSON: {e}")
                continue
            if doc.get("policy") != p:
                v.failures.append(f"{found.name} names policy {doc.get('policy')}, not {p}")
            unknown = [k for k in doc.get("params", {}) if k not in cfg]
            if unknown:
                v.failures.append(f"{found.name} sets parameters no cfg has: {unknown}")
            if not list((folder / f"checkpoint_p{p}").glob("checkpoint_*.pth")):
                v.failures.append(f"policy {p} has a PBT member file but no checkpoint")
    return v


def steps_lost(sweep: Sweep, verdicts: dict[str, Verdict]) -> None:
    """Fill each fault's ``steps_lost``: for each resume of an experiment, the env steps status.json showed
    before it (since the previous resume) minus what it resumed at; charged to the last fault before it that
    could have ended the training (a signal to one of its processes or the runner, a machine stop)."""
    for exp, v in verdicts.items():
        obs = sweep.observed.get(exp)
        if obs is None:
            continue
        resumes = sorted({round(t, 0): t for t, *_ in v.resumes}.values())
        last = 0.0
        for t in resumes:
            resumed = sum(s for rt, _, s, _ in v.resumes if abs(rt - t) < 5)
            before = [s for ts, s in obs.steps if last <= ts < t - 0.5]
            last = t
            if not before:
                continue  # the first start, or nothing was seen before it
            lost = max(0, max(before) - resumed)
            cause = [f for f in sweep.injected if sweep.t0 + f.at_sec <= t and f.experiment in (exp, None)
                     and not f.note.startswith("skipped")]
            # a training ends by a signal or a machine stop; a full disk, a cut file or a killed game alone does
            # not end one (they are charged only when nothing else came before the resume)
            ending = [f for f in cause if f.kind in ("sigkill", "sigstop", "machine_stop")]
            if ending or cause:
                f = (ending or cause)[-1]
                f.steps_lost = (f.steps_lost or 0) + lost
                if not f.recovered_by:
                    f.recovered_by = "resumed from its checkpoint"


def _runner_lines(sweep: Sweep) -> list[str]:
    try:
        return sweep.log_file.read_text(errors="replace").splitlines()
    except OSError:
        return []


def explain(sweep: Sweep, cfgs: dict[str, dict]) -> list[str]:
    """Fill each fault's ``recovered_by`` from the logs; one line per fault the logs do not account for."""
    unaccounted = []
    runner = _runner_lines(sweep)
    for f in sweep.injected:
        if f.note.startswith("skipped"):
            f.recovered_by = "-"
            continue
        if f.recovered_by:
            continue
        t = sweep.t0 + f.at_sec
        exp_log = log_lines(sweep.run_dir / f.experiment / "sf_log.txt") if f.experiment else []
        after = [msg for ts, _, msg in exp_log if ts >= t - 1.0]
        name = f.target.split("/", 1)[1] if "/" in f.target else f.target
        # the runner's lines carry no time: a restart of the experiment counts for a kill only (a short SIGSTOP
        # needs none, and an unrelated later restart must not be taken for its recovery)
        restarted_by_runner = f.kind == "sigkill" and f.experiment is not None and any(
            line.startswith(f"[runner] RESTART {f.experiment} ") for line in runner)
        if f.kind in ("sigkill", "sigstop") and name.startswith(("forkserver", "resource_tracker")):
            what = "forkserver" if name.startswith("forkserver") else "resource tracker"
            hit = next((m for m in after if f"the {what} (pid {f.pid}) died" in m), None)
            if hit:
                f.recovered_by = "a new " + what
            elif f.kind == "sigstop":
                f.recovered_by = "SIGCONT (nothing needed it meanwhile)"
        elif f.kind in ("sigkill", "sigstop") and name not in ("coordinator",) and not name.startswith("rank_"):
            hit = next((m for m in after if name in m and ("restarted it" in m or "stopping" in m)), None)
            if hit and "restarted it" in hit:
                f.recovered_by = f"restart of {name} (coordinator)"
            elif restarted_by_runner:
                f.recovered_by = "runner restart, resumed from its checkpoint"
            elif f.kind == "sigstop":
                hb = cfgs.get(f.experiment, {}).get("heartbeat_timeout_sec")
                f.recovered_by = f"SIGCONT before the heartbeat timeout ({hb} s)"
        elif f.kind == "sigstop" and name == "runner":
            f.recovered_by = "SIGCONT (the experiments ran on meanwhile)"
        elif f.kind in ("sigkill", "sigstop"):
            if restarted_by_runner:
                f.recovered_by = "runner restart, resumed from its checkpoint"
            elif f.kind == "sigstop":
                f.recovered_by = "SIGCONT (the others waited)"
            elif any("torchrun" in m or "rank" in m for m in after):
                f.recovered_by = "torchrun restart of every rank"
        elif f.kind == "disk_full":
            saves = [m for ts, _, m in _all_logs(sweep) if t <= ts <= t + 60 and "could not be saved" in m]
            f.recovered_by = (f"{len(saves)} checkpoint save(s) failed and were retried" if saves
                              else "no write failed while it was full")
        elif f.kind == "truncate_checkpoint":
            fell_back = [m for m in after if "cannot be loaded" in m and "falling back" in m]
            f.recovered_by = ("the resume fell back to the previous checkpoint" if fell_back
                              else "pruned or never read again (newer checkpoints came)")
        elif f.kind == "kill_doom":
            hit = next((m for m in after if "episode is dropped" in m or "restarted it" in m or "crash" in m), None)
            f.recovered_by = "the env was made anew" if hit else ""
        if not f.recovered_by:
            unaccounted.append(f"{f.at_sec:.1f} s {f.kind} {f.target}: no log line says what recovered it")
    return unaccounted


def _all_logs(sweep: Sweep) -> list[tuple[float, str, str]]:
    out = []
    for exp in sweep.observed:
        out += log_lines(sweep.run_dir / exp / "sf_log.txt")
    return out


def leaks(sweep: Sweep) -> list[str]:
    """Processes of the sweep still alive; shared-memory files named after one of its processes."""
    out = [f"process {pid} ({what}) still alive" for pid, what in sweep.leftovers()]
    pids = {str(pid) for pid, _ in sweep.seen}
    if os.path.isdir("/dev/shm"):
        for name in sorted(set(os.listdir("/dev/shm")) - sweep.shm_before):
            if any(re.search(rf"(^|[-_]){pid}([-_]|$)", name) for pid in pids):
                out.append(f"/dev/shm/{name} left behind")
    return out


def report(sweep: Sweep, verdicts: dict[str, Verdict], leaked: list[str], unaccounted: list[str],
           command: str, seed: int) -> str:
    """The report (markdown): the command, the table of faults, the invariants per experiment."""
    lines = [f"Command: `{command}`", "", f"Seed {seed}: {len(sweep.injected)} faults, "
             f"{sum(1 for f in sweep.injected if not f.note.startswith('skipped'))} landed, over "
             f"{max((f.at_sec for f in sweep.injected), default=0):.0f} s; runner launches: {sweep.launches}.", "",
             "| time (s) | fault | target | recovered by | env steps lost |", "|---:|---|---|---|---:|"]
    for f in sweep.injected:
        note = f" ({f.note})" if f.note else ""
        lost = "-" if f.steps_lost is None else f"{f.steps_lost:,}"
        lines.append(f"| {f.at_sec:.1f} | {f.kind} | {f.target}{note} | {f.recovered_by or '**not accounted for**'} "
                     f"| {lost} |")
    lines += ["", "| experiment | invariants | resumes (env steps: resumed / newest intact checkpoint) |",
              "|---|---|---|"]
    for exp, v in verdicts.items():
        state = "all hold" if not v.failures else "<br>".join(f"**{x}**" for x in v.failures)
        resumes = ", ".join(f"p{p} {s:,}/{'?' if e is None else f'{e:,}'}" for _, p, s, e in v.resumes) or "-"
        lines.append(f"| {exp} | {state} | {resumes} |")
    lines += ["", "Leaks: " + ("none (no process of the sweep alive, no shared-memory file of one)" if not leaked
                               else "; ".join(leaked))]
    if unaccounted:
        lines += ["", "Faults the logs do not account for: " + "; ".join(unaccounted)]
    return "\n".join(lines) + "\n"
