"""Experiment folder paths and cfg.json save/load."""

import json
import os
from pathlib import Path

import pytest

from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.experiment import (cfg_path, checkpoint_dir, done_path, experiment_dir, load_cfg, log_path, save_cfg,
                            summary_dir)


@pytest.fixture
def cfg(tmp_path):
    return default_cfg(train_dir=tmp_path, experiment="exp")


def test_paths(cfg, tmp_path):
    root = tmp_path / "exp"
    assert experiment_dir(cfg) == root
    assert cfg_path(cfg) == root / "cfg.json"
    assert log_path(cfg) == root / "sf_log.txt"
    assert done_path(cfg) == root / "done"
    assert summary_dir(cfg, 2) == root / ".summary" / "2"
    assert checkpoint_dir(cfg, 1) == root / "checkpoint_p1"
    assert not root.exists()  # paths create nothing


def test_save_load_roundtrip_skips_what_json_cannot_hold(cfg):
    cfg.some_path = Path("/x/y")
    cfg.some_set = {"b", "a"}
    cfg.not_jsonable = object()
    path = save_cfg(cfg)
    assert path == cfg_path(cfg)
    data = load_cfg(path)
    assert data["rollout"] == cfg.rollout and data["env"] == "gym_CartPole-v1"
    assert data["train_dir"] == cfg.train_dir and data["seed"] is None
    assert data["some_path"] == "/x/y" and data["some_set"] == ["a", "b"]
    assert "not_jsonable" not in data
    assert [p.name for p in path.parent.iterdir()] == ["cfg.json"]  # no temp file left


def test_failed_save_keeps_the_old_file(cfg, monkeypatch):
    save_cfg(cfg)
    before = cfg_path(cfg).read_text()
    cfg.rollout = 64

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        save_cfg(cfg)
    monkeypatch.undo()
    assert cfg_path(cfg).read_text() == before
    assert [p.name for p in cfg_path(cfg).parent.iterdir()] == ["cfg.json"]


def test_load_corrupted(tmp_path):
    path = tmp_path / "cfg.json"
    path.write_text('{"a": ')
    with pytest.raises(ConfigError) as e:
        load_cfg(path)
    assert str(path) in str(e.value) and "invalid JSON" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="does not exist"):
        load_cfg(tmp_path / "missing.json")


def test_saved_json_is_readable(cfg):
    text = save_cfg(cfg).read_text()
    assert json.loads(text)["experiment"] == "exp"
    assert text.count("\n") > 10  # indented for humans
