"""Weights & Biases logging, for real in offline mode: what the offline run folder holds, resume, failures.

Nothing reaches the network: WANDB_MODE=offline, no API key, and W&B's server address points at a
closed local port. The logged history is read back from the offline run's transaction log
(``run-<id>.wandb``). W&B ships no Python reader for it (``wandb sync --view`` and
``wandb.sdk.internal.datastore`` are gone since its Go core), so :func:`read_records` reads the format
itself: a 7-byte header (``:W&B``, magic 0xBEE1, version 0), then LevelDB-log records in 32 KiB blocks
(crc32c, length, type: full / first / middle / last), each a ``wandb_internal_pb2.Record`` protobuf.
"""

from __future__ import annotations

import json
import logging
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from sfx.registries import default_cfg
from sfx.errors import ConfigError
from sfx.experiment import wandb_log
from sfx.experiment.wandb_log import (RUN_ID_FILE, WandbLogger, parse_wandb_tags, read_or_create_run_id,
                                      require_wandb, wandb_run_id_path)

wandb = pytest.importorskip("wandb")
from wandb.proto import wandb_internal_pb2  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BLOCK = 32 * 1024
HEADER = 7  # ":W&B" + magic (2 bytes) + version (1 byte)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
# the flags the cfg gets (their defaults); set on a default cfg here, whether or not sfx.cfg has them yet
WANDB_FLAGS = {"with_wandb": False, "wandb_project": "sfx", "wandb_user": None, "wandb_group": None,
               "wandb_tags": [], "wandb_mode": None}


@pytest.fixture(autouse=True)
def offline_wandb(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # the discard port: a connection goes nowhere
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb_config"))  # no user settings read or written
    monkeypatch.setenv("WANDB__DISABLE_STATS", "true")  # no system-metrics sampler: 2 CPU cores are shared
    for name in ("WANDB_API_KEY", "WANDB_DIR", "WANDB_RUN_ID", "WANDB_RESUME", "WANDB_PROJECT", "WANDB_ENTITY",
                 "WANDB_RUN_GROUP", "WANDB_TAGS"):
        monkeypatch.delenv(name, raising=False)


def make_cfg(tmp_path: Path, **wandb_flags):
    cfg = default_cfg("gym_CartPole-v1", train_dir=tmp_path / "train_dir", experiment="exp", num_policies=2,
                      learning_rate=3e-4)
    for key, value in {**WANDB_FLAGS, "with_wandb": True, **wandb_flags}.items():
        setattr(cfg, key, value)
    return cfg


def read_records(path: Path) -> list:
    """Every record of a W&B transaction log (``run-<id>.wandb``), as ``wandb_internal_pb2.Record``."""
    data = path.read_bytes()
    assert data[:4] == b":W&B" and data[4:7] == b"\xe1\xbe\x00", data[:7]
    records, parts, pos = [], b"", HEADER
    while pos + HEADER <= len(data):
        if BLOCK - pos % BLOCK < HEADER:  # a block's tail too short for a record header is zero padding
            pos += BLOCK - pos % BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + HEADER])
        if pos + HEADER + length > len(data):  # still being written
            break
        chunk = data[pos + HEADER:pos + HEADER + length]
        pos += HEADER + length
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts + chunk)
            records.append(record)
            parts = b""
        elif kind in (FIRST, MIDDLE):
            parts += chunk
    return records


def finished_records(path: Path, timeout_sec: float = 30.0) -> list:
    """The records of a finished run's log. ``run.finish()`` returns before W&B's core process has written
    everything (at the process's exit W&B waits for it; a test reads from the same process): wait for the
    closing ``exit`` record."""
    deadline = time.monotonic() + timeout_sec
    while True:
        records = read_records(path) if path.is_file() else []
        if records and records[-1].WhichOneof("record_type") == "exit":
            return records
        if time.monotonic() > deadline:
            kinds = [r.WhichOneof("record_type") for r in records]
            pytest.fail(f"{path}: no exit record after {timeout_sec} s: {kinds}")
        time.sleep(0.05)


def history(records: list) -> list[dict]:
    """The logged rows, each a dict of key -> value (W&B's ``_step``, ``_runtime``, ``_timestamp`` left out)."""
    rows = []
    for r in records:
        if r.WhichOneof("record_type") == "history":
            row = {"/".join(item.nested_key) or item.key: json.loads(item.value_json) for item in r.history.item}
            rows.append({k: v for k, v in row.items() if not k.startswith("_")})
    return rows


def run_record(records: list):
    runs = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert len(runs) == 1
    return runs[0]


def config_of(records: list) -> dict:
    """The run's config: the run record's, updated by later config records."""
    config = {item.key: json.loads(item.value_json) for item in run_record(records).config.update}
    for r in records:
        if r.WhichOneof("record_type") == "config":
            config.update({item.key: json.loads(item.value_json) for item in r.config.update})
    return config


def offline_runs(cfg) -> list[Path]:
    return sorted((Path(cfg.train_dir) / cfg.experiment / "wandb").glob("offline-run-*"))


def test_offline_run_holds_scalars_by_step_and_cfg_and_a_resume_continues_the_same_run(tmp_path):
    cfg = make_cfg(tmp_path, wandb_group="sweep_1", wandb_tags=["cartpole", "lr,baseline"])
    logger = WandbLogger.start(cfg)
    assert logger is not None
    # what TrainingReporter.flush_summaries hands over: each policy's scalars at its own env steps
    logger.log(0, {"reward": 10.0, "len": 20.0, "loss/value": 0.5, "fps": 1000.0}, 2048)
    logger.log(1, {"reward": 7.0, "loss/value": float("nan")}, 1024)  # NaN left out, as in TensorBoard
    logger.log(0, {"reward": 12.5, "len": 25.0, "loss/value": 0.25, "fps": 1100.0}, 4096)
    logger.log(1, {"pbt/decisions": "copied policy 0"}, 3072)  # TrainingReporter.summary: text from PBT
    logger.finish()
    logger.finish()  # twice is harmless (close after a failed run)

    run_id = wandb_run_id_path(cfg).read_text().strip()
    [first] = offline_runs(cfg)
    assert first.name.endswith(f"-{run_id}")
    records = finished_records(first / f"run-{run_id}.wandb")
    assert history(records) == [
        {"p0/reward": 10.0, "p0/len": 20.0, "p0/loss/value": 0.5, "p0/fps": 1000.0, "p0/env_steps": 2048},
        {"p1/reward": 7.0, "p1/env_steps": 1024},
        {"p0/reward": 12.5, "p0/len": 25.0, "p0/loss/value": 0.25, "p0/fps": 1100.0, "p0/env_steps": 4096},
        {"p1/pbt/decisions": "copied policy 0", "p1/env_steps": 3072},
    ]
    # each policy's scalars are plotted against its own env steps, not W&B's row counter
    metrics = {(r.metric.glob_name or r.metric.name): r.metric.step_metric for r in records
               if r.WhichOneof("record_type") == "metric"}
    assert metrics == {"p0/env_steps": "", "p0/*": "p0/env_steps", "p1/env_steps": "", "p1/*": "p1/env_steps"}
    run = run_record(records)
    assert (run.run_id, run.project, run.run_group, run.display_name) == (run_id, "sfx", "sweep_1", "exp")
    assert list(run.tags) == ["cartpole", "lr", "baseline"]
    config = config_of(records)
    assert config["env"] == "gym_CartPole-v1" and config["learning_rate"] == 3e-4 and config["num_policies"] == 2
    assert config["with_wandb"] is True and config["wandb_group"] == "sweep_1"

    # the experiment is resumed (a requeued job) with a flag changed: same W&B run id, a new offline folder
    cfg = make_cfg(tmp_path, wandb_group="sweep_1", learning_rate=1e-3)
    logger = WandbLogger.start(cfg)
    logger.log(0, {"reward": 30.0}, 4096 + 512)
    logger.finish()
    assert wandb_run_id_path(cfg).read_text().strip() == run_id
    runs = offline_runs(cfg)
    # W&B adds -1 to the second folder's name when both started within the same second
    assert len(runs) == 2 and all(f"-{run_id}" in r.name for r in runs)
    second = next(r for r in runs if r != first)
    records = finished_records(second / f"run-{run_id}.wandb")
    assert run_record(records).run_id == run_id
    assert history(records) == [{"p0/reward": 30.0, "p0/env_steps": 4096 + 512}]
    assert config_of(records)["learning_rate"] == 1e-3, "the resumed run's config is the cfg it runs with"


def test_the_run_is_started_with_the_stored_id_and_resume_allow(tmp_path, monkeypatch):
    calls = []
    real_init = wandb.init
    monkeypatch.setattr(wandb, "init", lambda **kw: calls.append(kw) or real_init(**kw))
    cfg = make_cfg(tmp_path, wandb_mode="offline", wandb_user="team")
    wandb_run_id_path(cfg).parent.mkdir(parents=True)
    wandb_run_id_path(cfg).write_text("abc123\n")  # an id written by hand continues that W&B run
    logger = WandbLogger.start(cfg)
    logger.finish()
    [kw] = calls
    assert (kw["id"], kw["resume"], kw["mode"], kw["entity"], kw["project"]) == ("abc123", "allow", "offline", "team",
                                                                                 "sfx")
    assert Path(kw["dir"]) == Path(cfg.train_dir) / "exp", "W&B's files go into the experiment folder"
    assert [r.name.split("-")[-1] for r in offline_runs(cfg)] == ["abc123"]


def test_wandb_dir_set_by_the_user_takes_w_and_bs_files(tmp_path, monkeypatch):
    """Cluster users point WANDB_DIR at scratch space: W&B's files go there, the run id stays with the
    experiment (a resume finds it), and a resume with WANDB_DIR still set continues the same run there."""
    scratch = tmp_path / "scratch"
    monkeypatch.setenv("WANDB_DIR", str(scratch))
    cfg = make_cfg(tmp_path, wandb_mode="offline")
    for reward in (1.0, 2.0):  # a run and its resume
        logger = WandbLogger.start(cfg)
        logger.log(0, {"reward": reward}, 1024)
        logger.finish()
    run_id = wandb_run_id_path(cfg).read_text().strip()
    runs = sorted((scratch / "wandb").glob("offline-run-*"))
    # (W&B adds -1 to the second folder's name when both started within the same second)
    assert len(runs) == 2 and all(f"-{run_id}" in r.name for r in runs)
    assert [history(finished_records(r / f"run-{run_id}.wandb")) for r in runs] == [
        [{"p0/reward": 1.0, "p0/env_steps": 1024}], [{"p0/reward": 2.0, "p0/env_steps": 1024}]]
    assert not (Path(cfg.train_dir) / "exp" / "wandb").exists()


def test_without_with_wandb_nothing_starts_and_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(wandb, "init", lambda **kw: pytest.fail("wandb.init called"))
    cfg = make_cfg(tmp_path, with_wandb=False)
    assert WandbLogger.start(cfg) is None
    require_wandb(cfg)
    assert not (Path(cfg.train_dir) / "exp").exists()


def test_missing_wandb_package_is_a_config_error_only_with_with_wandb(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    require_wandb(make_cfg(tmp_path, with_wandb=False))
    with pytest.raises(ConfigError, match="pip install wandb"):
        WandbLogger.start(make_cfg(tmp_path))
    assert not wandb_run_id_path(make_cfg(tmp_path)).exists()


def test_importing_sfx_does_not_import_wandb():
    code = ("import sys, sfx.experiment, sfx.experiment.wandb_log, sfx.cfg; "
            "assert 'wandb' not in sys.modules, 'wandb imported'; print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


def test_a_failure_while_logging_is_logged_once_and_logging_stops(tmp_path, caplog):
    cfg = make_cfg(tmp_path)
    logger = WandbLogger.start(cfg)
    logger.log(0, {"reward": 1.0}, 100)
    calls = []

    def disk_full(row):
        calls.append(row)
        raise OSError(28, "No space left on device")

    logger.run.log = disk_full
    with caplog.at_level(logging.WARNING, logger=wandb_log.__name__):
        for step in (200, 300, 400):
            logger.log(0, {"reward": 2.0}, step)  # no exception reaches the caller (the reporter)
    # (INFO records too may be captured when an earlier test set the sfx loggers' level: count warnings only)
    warnings = [r for r in caplog.records if r.name == wandb_log.__name__ and r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "No space left on device" in warnings[0].getMessage()
    assert logger.failed and len(calls) == 1, "after a failure W&B is left alone"
    logger.finish()  # the run still ends (its files are closed)
    records = finished_records(offline_runs(cfg)[0] / f"run-{wandb_run_id_path(cfg).read_text().strip()}.wandb")
    assert history(records) == [{"p0/reward": 1.0, "p0/env_steps": 100}], "what was logged before is kept"


def test_a_failing_finish_is_logged_not_raised(tmp_path, caplog):
    logger = WandbLogger.start(make_cfg(tmp_path))
    real_finish = logger.run.finish

    def broken():
        real_finish()
        raise RuntimeError("W&B service gone")

    logger.run.finish = broken
    with caplog.at_level(logging.WARNING, logger=wandb_log.__name__):
        logger.finish()
    assert "W&B service gone" in caplog.text and logger.failed


def test_w_and_b_unreachable_at_start_means_training_without_it(tmp_path, monkeypatch, caplog):
    def unreachable(**kw):
        raise wandb.errors.CommError("Network error (ConnectionError)")

    monkeypatch.setattr(wandb, "init", unreachable)
    cfg = make_cfg(tmp_path)
    with caplog.at_level(logging.WARNING, logger=wandb_log.__name__):
        assert WandbLogger.start(cfg) is None
    assert "training goes on without W&B" in caplog.text
    run_id = wandb_run_id_path(cfg).read_text().strip()
    assert run_id in caplog.text, "the id is kept: the next start tries the same W&B run"
    assert read_or_create_run_id(cfg) == run_id


def test_w_and_b_refusing_the_settings_is_a_config_error(tmp_path, monkeypatch):
    def no_login(**kw):
        raise wandb.errors.UsageError("No API key configured. Use `wandb login` to log in.")

    monkeypatch.setattr(wandb, "init", no_login)
    with pytest.raises(ConfigError, match="wandb login.*--wandb_mode=offline"):
        WandbLogger.start(make_cfg(tmp_path, wandb_mode="online"))


@pytest.mark.parametrize("value,expected", [
    (None, []), ([], []), ("a", ["a"]), (["a", "b"], ["a", "b"]), ("a,b", ["a", "b"]), (["a, b", "c"], ["a", "b", "c"]),
    (["a", "a,b"], ["a", "b"]),
])
def test_tags_by_spaces_or_commas(value, expected):
    assert parse_wandb_tags(value) == expected


@pytest.mark.parametrize("value,message", [("a,,b", "empty tag"), (["a", ""], "empty tag"), ("x" * 65, "at most 64")])
def test_bad_tags_name_the_problem(value, message):
    with pytest.raises(ConfigError, match=message):
        parse_wandb_tags(value)


def test_a_run_id_file_with_no_id_is_a_config_error_naming_the_file(tmp_path):
    cfg = make_cfg(tmp_path)
    path = wandb_run_id_path(cfg)
    path.parent.mkdir(parents=True)
    path.write_text("not an id!\n")
    with pytest.raises(ConfigError, match=RUN_ID_FILE):
        WandbLogger.start(cfg)


def test_flags_parse_when_sfx_cfg_has_them():
    cfg = default_cfg()
    if not hasattr(cfg, "with_wandb"):
        pytest.skip("the --with_wandb flags are not in sfx.cfg yet")
    assert {k: getattr(cfg, k) for k in WANDB_FLAGS} == WANDB_FLAGS
    from sfx.registries import build_parser

    parsed = build_parser("gym_CartPole-v1").parse_args(["--env=gym_CartPole-v1", "--with_wandb", "--wandb_tags", "a",
                                                         "b,c", "--wandb_mode=offline"])
    assert parsed.with_wandb and parse_wandb_tags(parsed.wandb_tags) == ["a", "b", "c"]
    assert parsed.wandb_mode == "offline"


def test_a_real_training_logs_to_w_and_b_offline_and_its_resume_continues_the_run(tmp_path):
    """sfx.train's own reporter, end to end: a serial CartPole training with --with_wandb, then the same
    command with more steps (a resume): one run id, and each offline folder holds that part's rows."""
    from sfx.engine import run_training

    def train(steps):
        cfg = default_cfg("gym_CartPole-v1", train_dir=str(tmp_path / "td"), experiment="e2e", serial_mode=True,
                          num_workers=1, num_envs_per_worker=4, rollout=16, recurrence=16, batch_size=64, hidden_size=16,
                          device="cpu", seed=3, train_for_env_steps=steps, experiment_summaries_interval=0.2,
                          with_wandb=True, wandb_mode="offline")
        run_training(cfg)
        return cfg

    cfg = train(3000)
    run_id = wandb_run_id_path(cfg).read_text().strip()
    [first] = offline_runs(cfg)
    rows = history(finished_records(first / f"run-{run_id}.wandb"))
    steps = [r["p0/env_steps"] for r in rows if "p0/reward" in r]
    assert steps and all("p0/fps" in r for r in rows if "p0/reward" in r)
    cfg = train(6000)
    assert wandb_run_id_path(cfg).read_text().strip() == run_id
    second = next(r for r in offline_runs(cfg) if r != first)
    later = [r["p0/env_steps"] for r in history(finished_records(second / f"run-{run_id}.wandb")) if "p0/env_steps" in r]
    assert later and min(later) > max(steps) - 1024  # the resumed part goes on from where the first stopped


def test_an_evaluation_video_is_a_w_and_b_video_at_the_policys_env_steps(tmp_path):
    from sfx.experiment.videos import gif_bytes

    gif, _, _ = gif_bytes([np.full((8, 12, 3), c, dtype=np.uint8) for c in (0, 128, 255)], fps=10)
    cfg = make_cfg(tmp_path)
    logger = WandbLogger.start(cfg)
    logger.video(1, "eval/video", gif, 2048)
    logger.finish()
    run_id = wandb_run_id_path(cfg).read_text().strip()
    [run] = offline_runs(cfg)
    [row] = history(finished_records(run / f"run-{run_id}.wandb"))
    assert row["p1/env_steps"] == 2048
    # the history row's nested value comes out flat: p1/eval/video/{_type,path,sha256,size}
    assert row["p1/eval/video/_type"] == "video-file" and row["p1/eval/video/path"].endswith(".gif")
    assert row["p1/eval/video/size"] == len(gif)
    # the file W&B keeps (uploaded online) is the GIF itself
    assert (run / "files" / row["p1/eval/video/path"]).read_bytes() == gif
