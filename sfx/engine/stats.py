"""What the coordinator knows about a run: throughput windows, episode stats, learner stats.

It turns reports from workers into the console status line and TensorBoard scalars. Scalar
names are stable (``reward``, ``len``, ``fps``, ``policy_lag``, ``loss/*``, ...) because users'
dashboards and the monitoring tools match them by name.
"""

from __future__ import annotations

import collections
import math
import time
from typing import Any


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds) or seconds < 0:
        return "--:--:--"
    seconds = int(seconds)
    days, rem = divmod(seconds, 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    return (f"{days}d " if days else "") + f"{h:02d}:{m:02d}:{s:02d}"


CUMULATIVE_TRAIN_STATS = ("nan_batches",)


class ThroughputMeter:
    """Frames per second over sliding windows (e.g. 10 / 60 / 300 s) from a cumulative counter."""

    def __init__(self, windows_sec: tuple[int, ...] = (10, 60, 300)) -> None:
        self.windows = windows_sec
        self.samples: collections.deque = collections.deque()  # (time, cumulative count)
        self.total = 0
        # (time, cumulative count) of the first report that carried a count: where a steady pace can be
        # measured from (before it the envs were starting; its own count was made over an unknown time)
        self.first_counted: tuple[float, int] | None = None

    def mark_start(self, now: float | None = None) -> None:
        """Anchor the windows at the moment counting starts: without it the first report's count
        (accumulated before it) would be divided by the gap to the second report alone."""
        if not self.samples:
            self.samples.append((time.time() if now is None else now, self.total))

    def add(self, count: int, now: float | None = None) -> None:
        now = time.time() if now is None else now
        self.total += count
        self.samples.append((now, self.total))
        if count > 0 and self.first_counted is None:
            self.first_counted = (now, self.total)
        horizon = now - max(self.windows) - 1
        while len(self.samples) > 2 and self.samples[1][0] < horizon:
            self.samples.popleft()

    def rate(self, window_sec: float, now: float | None = None) -> float:
        now = time.time() if now is None else now
        if len(self.samples) < 2:
            return 0.0
        start = now - window_sec
        first = self.samples[0]
        for t, c in self.samples:
            if t >= start:
                break
            first = (t, c)
        dt = self.samples[-1][0] - first[0]
        return (self.samples[-1][1] - first[1]) / dt if dt > 0 else 0.0

    def rates(self, now: float | None = None) -> list[float]:
        return [self.rate(w, now) for w in self.windows]

    def measured_rate(self, window_sec: float, min_sec: float, now: float | None = None) -> float | None:
        """The pace over the last ``window_sec``, counted from the first report that carried a count at the
        earliest; None until counts have arrived over at least ``min_sec`` (or while nothing moves). What an
        ETA may be computed from: :meth:`rate` includes the start-up (envs being made, the first trajectory),
        which makes the first minute's rate far too low and an ETA from it hours too long."""
        now = time.time() if now is None else now
        if self.first_counted is None or self.samples[-1][0] - self.first_counted[0] < min_sec:
            return None
        base = self.first_counted
        for t, c in self.samples:
            if t > now - window_sec:
                break
            if t >= base[0]:
                base = (t, c)
        last_t, last_c = self.samples[-1]
        if last_t - base[0] <= 0 or last_c <= base[1]:
            return None
        return (last_c - base[1]) / (last_t - base[0])


class PolicyStats:
    """Per-policy rolling stats. With several tasks (``task_names``), also each task's episode reward and
    length over its last ``stats_avg`` episodes, its human-normalised score where one exists
    (:func:`sfx.envs.task_scores.human_normalized_score`), and the suite's scores over those tasks."""

    def __init__(self, stats_avg: int, task_names: tuple = ()) -> None:
        self.stats_avg = stats_avg
        self.task_names = tuple(task_names) if len(task_names) > 1 else ()
        self.task_episodes: dict[tuple[int, str], collections.deque] = collections.defaultdict(
            lambda: collections.deque(maxlen=stats_avg))
        self.new_task_episodes = False
        self.episodes: dict[str, collections.deque] = collections.defaultdict(
            lambda: collections.deque(maxlen=stats_avg))
        self.num_episodes = 0
        self.env_steps = 0
        self.train_step = 0
        self.train: dict[str, float] = {}
        self.train_acc: dict[str, list[float]] = collections.defaultdict(list)
        self.new_episodes: dict[str, list[float]] = collections.defaultdict(list)

    def add_episode(self, episode: dict) -> None:
        self.num_episodes += 1
        for k, v in episode.items():
            if k in ("policy", "task") or not isinstance(v, (int, float)):
                continue
            self.episodes[k].append(float(v))
            self.new_episodes[k].append(float(v))
        task = episode.get("task")
        if self.task_names and task is not None and 0 <= int(task) < len(self.task_names):
            for k in ("reward", "len"):
                if isinstance(episode.get(k), (int, float)):
                    self.task_episodes[(int(task), k)].append(float(episode[k]))
            self.new_task_episodes = True

    def task_means(self, key: str = "reward") -> dict[str, float]:
        """Each task's mean ``key`` over its last ``stats_avg`` episodes (tasks with no episode yet left out)."""
        return {name: sum(d) / len(d) for t, name in enumerate(self.task_names)
                if (d := self.task_episodes.get((t, key)))}

    def suite_scores(self) -> dict[str, float]:
        """``hns_mean``, ``hns_median``, ``hns_mean_capped`` over the tasks with a human-normalised score
        (each task's mean reward over its last ``stats_avg`` episodes); empty while none has one."""
        return {k[len("suite/"):]: v for k, v in self.task_summaries().items() if k.startswith("suite/")}

    def task_summaries(self) -> dict[str, float]:
        """``task/<name>/reward``, ``.../len``, ``.../hns`` (where the task has a human-normalised score) and,
        over the tasks with one, ``suite/hns_mean``, ``suite/hns_median``, ``suite/hns_mean_capped``."""
        from sfx.envs.task_scores import human_normalized_score, suite_scores

        out: dict[str, float] = {}
        hns: dict[str, float] = {}
        for key in ("reward", "len"):
            for name, value in self.task_means(key).items():
                out[f"task/{name}/{key}"] = value
        for name, reward in self.task_means("reward").items():
            score = human_normalized_score(name, reward)
            if score is not None:
                out[f"task/{name}/hns"] = hns[name] = score
        suite = suite_scores(hns) if hns else {}
        out.update({f"suite/{k}": float(v) for k, v in suite.items() if k != "num_tasks"})
        return out

    def add_train(self, stats: dict) -> None:
        self.env_steps = int(stats.get("env_steps", self.env_steps))
        self.train_step = int(stats.get("train_step", self.train_step))
        for k, v in stats.items():
            if isinstance(v, (int, float)):
                self.train[k] = float(v)
                self.train_acc[k].append(float(v))

    def mean(self, key: str) -> float:
        values = self.episodes.get(key)
        return sum(values) / len(values) if values else float("nan")

    def full_mean(self, key: str, stats_avg: int) -> float | None:
        """The mean of ``key`` over the last ``stats_avg`` episodes, None while fewer have ended."""
        if len(self.episodes.get(key, ())) < stats_avg:
            return None
        return self.mean(key)

    def pop_summaries(self) -> dict[str, float]:
        """Scalars accumulated since the last call, averaged, under their TensorBoard names."""
        out: dict[str, float] = {}
        for k, vs in self.train_acc.items():
            if vs and k not in ("env_steps", "train_step"):
                name = {"policy_lag_avg": "policy_lag", "lr": "learning_rate"}.get(k, k)
                # running totals are shown as they stand, everything else averaged over the interval
                out[name] = vs[-1] if k in CUMULATIVE_TRAIN_STATS else sum(vs) / len(vs)
        self.train_acc.clear()
        for k, vs in self.new_episodes.items():
            if vs:
                out[k if k in ("reward", "len") else f"episode/{k}"] = sum(self.episodes[k]) / len(self.episodes[k])
        if self.new_episodes:
            # episodes ended so far: tells a reader when `reward` became an average over a full --stats_avg window
            out["episodes"] = float(self.num_episodes)
        self.new_episodes.clear()
        if self.new_task_episodes:
            out.update(self.task_summaries())
            self.new_task_episodes = False
        return out


def reward_target_reached(policy_stats: list[PolicyStats], target: float | None,
                          stats_avg: int) -> tuple[int, float] | None:
    """``(policy, average reward)`` of the first policy whose average episode reward over its last
    ``stats_avg`` episodes is at least ``target`` (``--stop_at_reward``); None if none is, or no target."""
    if target is None:
        return None
    for p, s in enumerate(policy_stats):
        mean = s.full_mean("reward", stats_avg)
        if mean is not None and mean >= target:
            return p, mean
    return None


STATUS_MAX_TASKS = 6  # tasks whose rewards the status line lists one by one


def replay_text(train: dict[str, float]) -> str:
    """With experience replay (``replay/*`` in the learner's last statistics): the fresh share of the batch
    and each buffer's fill and mean sample age in learner steps, e.g. `` replay fresh 50%, 1_standard
    fill 38% age 4.2``; empty without replay."""
    if "replay/fresh_share" not in train:
        return ""
    buffers = sorted({k.split("/")[1] for k in train if k.startswith("replay/") and k.endswith("/fill")})
    parts = [f"replay fresh {train['replay/fresh_share']:.0%}"]
    for b in buffers:
        age = train.get(f"replay/{b}/age_mean")
        parts.append(f"{b} fill {train[f'replay/{b}/fill']:.0%}" + (f" age {age:.1f}" if age is not None else ""))
    return " " + ", ".join(parts)


def _number(value: float, spec: str) -> str:
    """``value`` formatted, or ``--`` while it is not known (no episode has ended, no learner step yet)."""
    return format(value, spec) if math.isfinite(value) else "--"


def reward_text(stats: PolicyStats) -> str:
    """A policy's progress for the status line: ``reward <mean>``; with several tasks each task's own mean
    reward instead (an average over tasks of other reward scales follows the largest scale only), the first
    ``STATUS_MAX_TASKS`` of them, after the suite's human-normalised scores where the tasks have them."""
    tasks = stats.task_means("reward")
    if not stats.task_names:
        return f"reward {_number(stats.mean('reward'), '.2f')}"
    if not tasks:
        return f"reward ({len(stats.task_names)} tasks, no episode yet)"
    parts = []
    suite = stats.suite_scores()
    if suite:
        parts.append(f"hns mean {suite['hns_mean']:.3f} median {suite['hns_median']:.3f}")
    shown = list(tasks.items())[:STATUS_MAX_TASKS]
    listed = ", ".join(f"{name} {value:,.2f}" for name, value in shown)
    more = len(stats.task_names) - len(shown)
    parts.append(f"task rewards {listed}" + (f" (+{more} more)" if more > 0 else ""))
    return " ".join(parts)


ETA_MIN_MEASURED_SEC = 5.0  # the status line gives an ETA once env steps have been counted for this long
ETA_WINDOW_SEC = 60.0


def status_line(policy_stats: list[PolicyStats], fps: list[float], samples_per_sec: float,
                env_steps: int, target_steps: int, elapsed: float, time_limit: float,
                all_ranks_fps: list[float] | None = None, world_size: int = 1,
                eta_rate: float | None = None) -> str:
    """One console line: throughput, progress, reward, lag, ETA. With several ranks ``fps`` is this rank's
    and ``all_ranks_fps`` every rank's together (``env_steps`` counts every rank's).

    ``eta_rate`` is the measured pace in env steps per second the ETA is computed from
    (:meth:`ThroughputMeter.measured_rate`, every rank's with several); None until one has been measured:
    ``ETA --`` then. Values not known yet (a reward before any episode ended, a lag before any learner step)
    show as ``--``."""
    fps_txt = "/".join(f"{f:,.0f}" for f in fps)
    parts = [f"FPS (10s/60s/300s) {fps_txt}", f"samples/s {samples_per_sec:,.0f}"]
    if all_ranks_fps is not None:
        parts[0] = f"FPS (10s/60s/300s) this rank {fps_txt}, all {world_size} ranks " + \
            "/".join(f"{f:,.0f}" for f in all_ranks_fps)
    pct = 100.0 * env_steps / target_steps if target_steps > 0 else 0.0
    parts.append(f"env steps {env_steps:,} ({pct:.1f}%)")
    for p, s in enumerate(policy_stats):
        tag = f"p{p} " if len(policy_stats) > 1 else ""
        lag = s.train.get("policy_lag_avg", float("nan"))
        lag_max = s.train.get("policy_lag_max", float("nan"))
        lag_txt = f"{lag:.1f}/{lag_max:.0f}" if math.isfinite(lag) and math.isfinite(lag_max) else "--"
        parts.append(f"{tag}{reward_text(s)} len {_number(s.mean('len'), '.0f')} lag {lag_txt}"
                     + replay_text(s.train))
    eta = "--"  # no pace measured yet: a time limit alone says when the run ends at the latest, not when
    if eta_rate:
        eta_sec = max(0, target_steps - env_steps) / eta_rate
        eta = format_duration(min(eta_sec, time_limit - elapsed) if time_limit < 1e9 else eta_sec)
    parts.append(f"elapsed {format_duration(elapsed)} ETA {eta}")
    return " | ".join(parts)


def write_summaries(writer: Any, scalars: dict[str, float], step: int) -> None:
    for k, v in scalars.items():
        if math.isfinite(v):
            writer.add_scalar(k, v, step)
