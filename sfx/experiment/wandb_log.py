"""Weights & Biases (``--with_wandb``): the scalars TensorBoard gets, in one W&B run per experiment.

The run lives beside the rest of the experiment::

    train_dir/experiment/
        wandb_run_id.txt         the W&B run id: a resumed run (a requeued Slurm job) continues that run
        wandb/                   W&B's own files (offline-run-*/ or run-*/, debug logs)

unless ``WANDB_DIR`` is set (cluster users point it at scratch space): W&B's own files then go to
``$WANDB_DIR/wandb/``, as W&B itself would put them; the run id file stays in the experiment folder.

Keys are ``p{N}/<TensorBoard name>`` (``p0/reward``, ``p1/loss/value``): TensorBoard keeps each policy
in its own folder (``.summary/{N}/``), a W&B run has one namespace. Each policy's x-axis is its own
``p{N}/env_steps`` (``define_metric``), not W&B's internal ``_step``: policies count env steps apart,
and a resumed run starts again from its last checkpoint, below the last step W&B saw; with the
internal step, W&B would drop every value logged at a lower step than before.

``--wandb_mode`` None leaves the mode to W&B (``WANDB_MODE``, ``wandb offline``; else online): a
cluster without internet sets ``WANDB_MODE=offline`` once, and ``wandb sync <experiment>/wandb/offline-run-*``
uploads later (a resumed run's folders sync into the same run, in order).

W&B is optional: ``wandb`` is imported only when ``--with_wandb`` is on, and missing it is a
:class:`~sfx.errors.ConfigError` before training starts. Once running, W&B never stops a training:
a failure to start (network) or to log (disk full, a dead W&B service) is logged once, and
TensorBoard goes on alone. Only the main rank (rank 0) logs, as only it writes summaries.
"""

from __future__ import annotations

import importlib.util
import io
import logging
import math
import os
import re
import secrets
import string
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sfx.errors import ConfigError
from sfx.experiment.cfg_io import atomic_write_text, cfg_to_dict
from sfx.experiment.paths import experiment_dir

log = logging.getLogger(__name__)

RUN_ID_FILE = "wandb_run_id.txt"
# W&B's own limits (an init with a longer tag fails); checked at start so the error names the flag
MAX_TAG_CHARS = 64
RUN_ID_CHARS = 8
_RUN_ID_RE = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")


def wandb_files_root(cfg: Any) -> Path:
    """The folder W&B writes its ``wandb/`` folder into: ``$WANDB_DIR`` when set, else the experiment folder."""
    env_dir = os.environ.get("WANDB_DIR")
    return Path(env_dir).expanduser() if env_dir else experiment_dir(cfg)


def wandb_run_id_path(cfg: Any) -> Path:
    """``train_dir/experiment/wandb_run_id.txt``."""
    return experiment_dir(cfg) / RUN_ID_FILE


def wandb_key(policy: int, tag: str) -> str:
    """The W&B key of policy ``policy``'s TensorBoard scalar ``tag``: ``p0/reward``."""
    return f"p{policy}/{tag}"


def parse_wandb_tags(value: str | list | tuple | None) -> list[str]:
    """``--wandb_tags``: ``a b`` (several words) or ``a,b`` (commas), or both -> ``["a", "b"]``.

    Raises:
        ConfigError: an empty tag (``a,,b``) or one longer than W&B allows (64 characters).
    """
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    tags: list[str] = []
    for item in items:
        for tag in str(item).split(","):
            tag = tag.strip()
            if not tag:
                raise ConfigError(f"--wandb_tags={','.join(map(str, items))} has an empty tag; give tags separated "
                                  f"by commas or spaces, e.g. --wandb_tags=baseline,cartpole")
            if len(tag) > MAX_TAG_CHARS:
                raise ConfigError(f"--wandb_tags: tag {tag!r} has {len(tag)} characters; W&B allows at most "
                                  f"{MAX_TAG_CHARS}")
            tags.append(tag)
    return list(dict.fromkeys(tags))


def require_wandb(cfg: Any) -> None:
    """With ``--with_wandb``: check, without importing it, that ``wandb`` is installed, and that the tags
    are valid. Call before anything starts (the coordinator does), so a missing package is a one-line
    error, not a warning minutes later.

    Raises:
        ConfigError: ``wandb`` is not installed, or bad ``--wandb_tags``.
    """
    if not cfg.with_wandb:
        return
    if importlib.util.find_spec("wandb") is None:
        raise ConfigError("--with_wandb needs the wandb package: pip install wandb (or pip install sfx[wandb]); "
                          "or run with --with_wandb=False")
    parse_wandb_tags(cfg.wandb_tags)


def read_or_create_run_id(cfg: Any) -> str:
    """The experiment's W&B run id: the one in ``wandb_run_id.txt``, else a new one, written there first
    (so a run killed during W&B's start still resumes the same W&B run).

    Writing an id into that file before the first start continues that W&B run (same project).

    Raises:
        ConfigError: the file holds something that is no W&B run id.
    """
    path = wandb_run_id_path(cfg)
    if path.is_file():
        run_id = path.read_text(encoding="utf-8").strip()
        if not _RUN_ID_RE.match(run_id):
            raise ConfigError(f"{path} holds {run_id[:80]!r}, which is no W&B run id (1-64 letters, digits, '_', "
                              f"'-'); delete the file to start a new W&B run")
        return run_id
    # W&B's own form (8 lowercase letters and digits): unique within a project by chance, like W&B's ids
    run_id = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(RUN_ID_CHARS))
    atomic_write_text(path, run_id + "\n")
    return run_id


def _scalar(value: Any) -> float | str | None:
    """What W&B gets for a summary value: a finite float, a string (text, e.g. PBT decisions), or None
    (skipped, as TensorBoard skips NaN and inf)."""
    if isinstance(value, str):
        return value
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


class WandbLogger:
    """One experiment's W&B run: :meth:`start` it, :meth:`log` each policy's scalars, :meth:`finish`.

    The hook in :class:`~sfx.engine.reporting.TrainingReporter`::

        self.wandb = WandbLogger.start(cfg) if main_rank else None      # __init__; None without --with_wandb
        self.wandb.log(p, scalars, s.env_steps)                          # flush_summaries, beside write_summaries
        self.wandb.log(policy, {tag: value}, step)                       # summary (observers: PBT)
        self.wandb.finish()                                              # close
    """

    def __init__(self, run: Any, num_policies: int) -> None:
        self.run = run
        self.failed = False
        for p in range(num_policies):
            self._define_policy_axis(p)

    def _define_policy_axis(self, policy: int) -> None:
        steps = wandb_key(policy, "env_steps")
        self.run.define_metric(steps)
        self.run.define_metric(wandb_key(policy, "*"), step_metric=steps)

    @classmethod
    def start(cls, cfg: Any) -> WandbLogger | None:
        """Start (or, with the id in ``wandb_run_id.txt``, resume) the experiment's W&B run with ``cfg`` as
        its config. None without ``--with_wandb``, or when W&B could not start (logged: training goes on).

        Raises:
            ConfigError: ``wandb`` missing, bad ``--wandb_tags`` or run id file, or W&B refuses the
                settings (online mode without ``wandb login``: the message says what to do).
        """
        if not cfg.with_wandb:
            return None
        require_wandb(cfg)
        import wandb

        run_id = read_or_create_run_id(cfg)
        try:
            run = wandb.init(
                project=cfg.wandb_project, entity=cfg.wandb_user, group=cfg.wandb_group,
                tags=parse_wandb_tags(cfg.wandb_tags) or None, name=cfg.experiment, id=run_id, resume="allow",
                dir=str(wandb_files_root(cfg)), mode=cfg.wandb_mode,
                # sf_log.txt holds every process's log; W&B's console capture would see the coordinator's only
                # and wrap its stdout. create_new: never hand back (or end) another run active in this process
                settings=wandb.Settings(console="off", reinit="create_new"))
        except wandb.errors.UsageError as e:
            raise ConfigError(f"--with_wandb: W&B refused to start: {e} (offline: --wandb_mode=offline or "
                              f"WANDB_MODE=offline, then wandb sync)") from None
        except Exception as e:  # noqa: BLE001 - W&B unreachable or broken: train without it, say so once
            log.warning("W&B could not start (%s: %s); training goes on without W&B (TensorBoard summaries are "
                        "written as always); the next start of this experiment tries again with W&B run id %s",
                        type(e).__name__, e, run_id)
            return None
        try:
            # a resumed experiment may have changed flags (explicit ones override cfg.json): the run shows the
            # cfg it runs with now
            run.config.update(cfg_to_dict(cfg), allow_val_change=True)
            logger = cls(run, cfg.num_policies)
        except Exception as e:  # noqa: BLE001
            log.warning("W&B started but failed to take the config (%s: %s); training goes on without W&B",
                        type(e).__name__, e)
            _finish_quietly(run)
            return None
        log.info("W&B run %s (project %s%s, mode %s) in %s", run_id, cfg.wandb_project,
                 f", group {cfg.wandb_group}" if cfg.wandb_group else "", run.settings.mode,
                 wandb_files_root(cfg) / "wandb")
        return logger

    def log(self, policy: int, scalars: Mapping[str, Any], env_steps: int) -> None:
        """Policy ``policy``'s scalars (TensorBoard names) at ``env_steps``, as ``p{policy}/<name>``
        against ``p{policy}/env_steps``. NaN and inf are left out (as TensorBoard leaves them); a failure
        is logged once, then W&B is left alone for the rest of the run."""
        if self.failed or self.run is None:
            return
        row: dict[str, Any] = {}
        for tag, value in scalars.items():
            x = _scalar(value)
            if x is not None:
                row[wandb_key(policy, tag)] = x
        if not row:
            return
        row[wandb_key(policy, "env_steps")] = int(env_steps)
        try:
            self.run.log(row)
        except Exception as e:  # noqa: BLE001 - disk full, a dead W&B service: never stop training
            self._fail("log", e)

    def video(self, policy: int, tag: str, gif: bytes, env_steps: int) -> None:
        """An animated GIF as a W&B video ``p{policy}/<tag>`` at ``env_steps`` (failures: as :meth:`log`)."""
        if self.failed or self.run is None:
            return
        try:
            import wandb

            self.run.log({wandb_key(policy, tag): wandb.Video(io.BytesIO(gif), format="gif"),
                          wandb_key(policy, "env_steps"): int(env_steps)})
        except Exception as e:  # noqa: BLE001
            self._fail("log a video", e)

    def finish(self) -> None:
        """End the W&B run (its files flushed; online: uploaded). Safe to call twice or after a failure."""
        run, self.run = self.run, None
        if run is None:
            return
        try:
            run.finish()
        except Exception as e:  # noqa: BLE001
            self._fail("finish", e)

    def _fail(self, what: str, e: BaseException) -> None:
        if not self.failed:
            log.warning("W&B failed to %s (%s: %s); W&B is off for the rest of this run, TensorBoard summaries go "
                        "on (resuming the experiment continues the same W&B run)", what, type(e).__name__, e)
        self.failed = True


def _finish_quietly(run: Any) -> None:
    try:
        run.finish()
    except Exception:  # noqa: BLE001 - already failing; the warning was logged
        pass
