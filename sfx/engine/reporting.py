"""Reporting: what a training shows while it runs. The status line (FPS, reward, ETA), TensorBoard
summaries per policy (and Weights & Biases with ``--with_wandb``: ``sfx.experiment.wandb_log``),
status.json (read by ``python -m sfx.runner.run --status``), and the run-wide
counters (env errors, checkpoint failures, restarts) they all carry.

A part of the coordinator loop (:func:`sfx.engine.coordinator.run_loop`): it takes every report
and, on its own clock, writes what it shows; it never stops the run.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable

from sfx.engine.perf import GpuMonitor, PerfTable
from sfx.engine.protocol import CHECKPOINT, CHECKPOINT_FAILED, LEARNER_READY, PERF, ROLLOUT, TRAIN
from sfx.engine.resources import process_rss_mb
from sfx.engine.stats import (ETA_MIN_MEASURED_SEC, ETA_WINDOW_SEC, PolicyStats, ThroughputMeter, status_line,
                              write_summaries)

log = logging.getLogger(__name__)


class TrainingReporter:
    """Per-policy statistics and meters of a training, and everything that shows them."""

    def __init__(self, cfg: Any, pids: Callable[[], dict[str, int]], world_size: int = 1,
                 task_names: tuple = (), main_rank: bool = True) -> None:
        from torch.utils.tensorboard import SummaryWriter

        from sfx.experiment import summary_dir
        from sfx.experiment.wandb_log import WandbLogger

        self.cfg = cfg
        self.pids = pids  # the components' processes (memory summaries, status.json)
        # None: no events file yet (a full disk as the training starts, which used to end it with exit code 1);
        # the first summary with room makes one (see _writer)
        self.writers: list[Any] = [None] * cfg.num_policies
        for p in range(cfg.num_policies):
            try:
                self.writers[p] = SummaryWriter(str(summary_dir(cfg, p)), flush_secs=10)
            except OSError as e:
                log.warning("policy %d: TensorBoard summaries cannot be written yet (%s): they start once there is "
                            "room", p, e.strerror or e)
        self.policies = [PolicyStats(cfg.stats_avg, task_names) for _ in range(cfg.num_policies)]
        self.fps = ThroughputMeter()
        self.samples = ThroughputMeter()
        # with several ranks: every rank's frames together, from the learners' env step count (all ranks')
        self.world_size = world_size
        self.all_ranks_fps = ThroughputMeter() if world_size > 1 else None
        self.learners_ready: set[int] = set()
        # run-wide counts, in TensorBoard
        self.counters = {"env_errors": 0, "checkpoint_failures": 0, "component_restarts": 0}
        self.summary_hooks: list[Callable[[int, int], None]] = []  # (policy, env_steps): observers' summaries
        # --with_wandb: the same scalars to Weights & Biases (rank 0 only; None without it)
        self.wandb = WandbLogger.start(cfg) if main_rank else None
        # where every component's time goes (sfx.engine.perf), and the GPU's utilisation on CUDA
        self.perf = PerfTable()
        cuda_index = _cuda_index(cfg)
        self.gpu = GpuMonitor.create(cuda_index) if cuda_index is not None else None
        self.last_gpu_sample = 0.0
        self.start = self.last_report = self.last_summary = time.time()

    # ------------------------------------------------------------------ loop part

    def started(self, start: float) -> None:
        """The runtime has started every component; ``start`` is when the loop began starting them (the
        run's clock: elapsed time and ETA count from it; the meters from now)."""
        self.start = self.last_report = self.last_summary = start
        self.fps.mark_start()
        self.samples.mark_start()
        if self.all_ranks_fps is not None:
            self.all_ranks_fps.mark_start()
        self.write_status("running", time.time())

    def handle(self, reports: list) -> None:
        for kind, who, payload in reports:
            if kind == ROLLOUT:
                self.fps.add(payload["env_steps"] * self.cfg.env_frameskip)
                self.counters["env_errors"] += payload.get("env_errors", 0)
                for ep in payload["episodes"]:
                    self.policies[ep["policy"]].add_episode(ep)
            elif kind == TRAIN:
                self.samples.add(payload["samples"])
                if self.all_ranks_fps is not None:
                    before = self.policies[who].env_steps
                    self.all_ranks_fps.add(max(0, payload["env_steps"] - before) * self.cfg.env_frameskip)
                self.policies[who].add_train(payload)
            elif kind == LEARNER_READY:
                self.learners_ready.add(who)
                self.policies[who].env_steps = payload["env_steps"]
                self.policies[who].train_step = payload["train_step"]
            elif kind == CHECKPOINT:
                log.debug("policy %d checkpoint %s", who, payload["path"])
            elif kind == CHECKPOINT_FAILED:
                self.counters["checkpoint_failures"] += 1
            elif kind == PERF:
                self.perf.add(who, payload)

    def check(self, now: float) -> None:
        cfg = self.cfg
        if self.gpu is not None and now - self.last_gpu_sample >= 1.0:
            self.last_gpu_sample = now
            self.gpu.sample()
        if now - self.last_report >= cfg.report_every_sec:
            self.last_report = now
            self.perf.roll()
            pace = self.all_ranks_fps if self.all_ranks_fps is not None else self.fps  # env_steps is every rank's
            line = status_line(self.policies, self.fps.rates(now), self.samples.rate(60, now), self.env_steps(),
                               cfg.train_for_env_steps, now - self.start, cfg.train_for_seconds,
                               self.all_ranks_fps.rates(now) if self.all_ranks_fps is not None else None,
                               self.world_size, eta_rate=pace.measured_rate(ETA_WINDOW_SEC, ETA_MIN_MEASURED_SEC, now))
            busy = self.perf.status_text()
            log.info(line + (f" | {busy}" if busy else ""))
            self.write_status("running", now)
        if now - self.last_summary >= cfg.experiment_summaries_interval:
            self.last_summary = now
            self.flush_summaries()
        return None

    # ------------------------------------------------------------------ what others read

    @property
    def all_learners_ready(self) -> bool:
        return len(self.learners_ready) == self.cfg.num_policies

    def env_steps(self) -> int:
        return sum(s.env_steps for s in self.policies)

    def restarted(self) -> None:
        self.counters["component_restarts"] += 1
        self.write_status("running", time.time())

    # ------------------------------------------------------------------ outputs

    def write_status(self, state: str, now: float, stop_reason: str | None = None,
                     result: dict | None = None) -> None:
        """status.json: the state, progress, rewards and throughput; at the end, which rule stopped the run.
        While running, ``fps`` is the last minute's; at the end (``result``: :meth:`result`'s) the session's, the
        figure the closing line gives (a last-minute rate of a short run, or of one that started slowly, is
        not the run's)."""
        from sfx.experiment import write_status

        rewards = [s.mean("reward") for s in self.policies]
        throughput = {"fps": self.fps.rate(60, now) if result is None else result["fps"]}
        if self.all_ranks_fps is not None:  # several ranks: fps is the training's (every rank's), as env_steps is
            every_rank = self.all_ranks_fps.rate(60, now) if result is None else result["fps_all_ranks"]
            throughput = {"fps": every_rank, "fps_this_rank": throughput["fps"], "world_size": self.world_size}
        try:
            write_status(self.cfg, status=state, env_steps=self.env_steps(),
                         train_for_env_steps=self.cfg.train_for_env_steps,
                         reward=[None if r != r else r for r in rewards], elapsed_sec=now - self.start,
                         restarts=self.counters["component_restarts"], components=self.pids(),
                         stop_reason=stop_reason, **throughput)
        except OSError as e:  # a full disk must not stop training; the checkpoints say the same louder
            log.warning("could not write %s: %s", "status.json", e.strerror or e)

    def _writer(self, policy: int) -> Any:
        """Policy ``policy``'s SummaryWriter, a new one (a new events file) in place of one a write error broke;
        None while none can be made (the disk still full)."""
        if self.writers[policy] is None:
            from torch.utils.tensorboard import SummaryWriter

            from sfx.experiment import summary_dir

            try:
                self.writers[policy] = SummaryWriter(str(summary_dir(self.cfg, policy)), flush_secs=10)
                log.info("policy %d: TensorBoard summaries go on in a new events file", policy)
            except OSError:
                return None
        return self.writers[policy]

    def _summaries_failed(self, policy: int, e: OSError) -> None:
        # TensorBoard's writer thread died on the error and its writer raises it for good (closing it could even
        # block on its full queue): it is dropped, and the next summary starts a new events file. A full disk
        # must not end a training (the checkpoints say so louder, and keep the last good one)
        self.writers[policy] = None
        log.warning("policy %d: TensorBoard summaries could not be written (%s): these are lost, the next ones go to "
                    "a new events file", policy, e.strerror or e)

    def summary(self, policy: int, tag: str, value: Any, step: int) -> None:
        """One scalar (or text) in a policy's TensorBoard summaries, for observers."""
        writer = self._writer(policy)
        try:
            if writer is None:
                pass
            elif isinstance(value, str):
                writer.add_text(tag, value, step)
            else:
                writer.add_scalar(tag, value, step)
        except OSError as e:
            self._summaries_failed(policy, e)
        if self.wandb is not None:
            self.wandb.log(policy, {tag: value}, step)

    def video(self, policy: int, tag: str, video: dict, step: int) -> None:
        """An animated GIF (``{"gif", "height", "width"}``, :func:`sfx.experiment.videos.gif_bytes`) in a
        policy's TensorBoard summaries (the Images tab plays it)."""
        from sfx.experiment.videos import video_summary

        writer = self._writer(policy)
        try:
            if writer is not None:
                writer._get_file_writer().add_summary(video_summary(tag, video["gif"], video["height"],
                                                                    video["width"]), step)
                writer.flush()
        except OSError as e:
            self._summaries_failed(policy, e)
        if self.wandb is not None:
            self.wandb.video(policy, tag, video["gif"], step)

    def flush_summaries(self) -> None:
        for p, s in enumerate(self.policies):
            for hook in self.summary_hooks:
                hook(p, s.env_steps)
            scalars = s.pop_summaries()
            scalars["fps"] = self.fps.rate(60)
            if self.all_ranks_fps is not None:
                scalars["fps_all_ranks"] = self.all_ranks_fps.rate(60)
            scalars["samples_per_sec"] = self.samples.rate(60)
            for name, count in self.counters.items():
                scalars[name] = float(count)
            if p == 0:
                # where the time goes, per kind of component (and the GPU's utilisation): policy 0's summaries only
                scalars.update(self.perf.scalars())
                if self.gpu is not None:
                    scalars.update(self.gpu.take())
                # memory of every process, to see a leak over hours (policy 0's summaries only)
                rss = process_rss_mb({"coordinator": os.getpid(), **self.pids()})
                scalars.update({f"memory/{n}_rss_mb": v for n, v in rss.items()})
                scalars["memory/total_rss_mb"] = sum(rss.values())
            wr = self._writer(p)
            try:
                if wr is not None:
                    write_summaries(wr, scalars, s.env_steps)
                    wr.flush()
            except OSError as e:
                self._summaries_failed(p, e)
            if self.wandb is not None:
                self.wandb.log(p, scalars, s.env_steps)

    def close(self) -> None:
        # the components' last windows (sent as they stopped) are TensorBoard's last perf/ scalars: a run
        # shorter than --report_every_sec has no other
        self.perf.roll()
        table = self.perf.table()
        if table:
            log.info("where the time went (share of each component's wall time; 'of which' parts are inside busy):\n%s",
                     table)
        self.flush_summaries()
        for p, wr in enumerate(self.writers):
            try:
                if wr is not None:
                    wr.close()
            except OSError as e:
                log.warning("policy %d: the last TensorBoard summaries could not be written (%s)", p, e.strerror or e)
        if self.wandb is not None:
            self.wandb.finish()

    def result(self, status: str) -> dict:
        cfg = self.cfg
        elapsed = time.time() - self.start
        return {"status": status, "env_steps": self.env_steps(), "elapsed_sec": elapsed,
                "samples_per_sec": self.fps.total / cfg.env_frameskip / elapsed if elapsed > 0 else 0.0,
                "fps": self.fps.total / elapsed if elapsed > 0 else 0.0,
                "reward": [s.mean("reward") for s in self.policies],
                "train_step": [s.train_step for s in self.policies],
                "train_stats": [dict(s.train) for s in self.policies],
                "perf": self.perf.summary(),
                # several ranks: every rank's frames this session (samples_per_sec and fps are this rank's)
                **({"fps_all_ranks": self.all_ranks_fps.total / elapsed if elapsed > 0 else 0.0}
                   if self.all_ranks_fps is not None else {})}


def _cuda_index(cfg: Any) -> int | None:
    """The CUDA device this run's learners use (NVML numbers devices the same way), or None off CUDA."""
    from sfx.engine.wiring import resolve_device

    device = resolve_device(cfg)
    if device.type != "cuda":
        return None
    return device.index if device.index is not None else 0
