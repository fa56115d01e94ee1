"""Checkpoints: naming, atomic save, pruning, milestones, fallback past corrupted files."""

import logging

import pytest
import torch

from sfx.cfg import ConfigError
from sfx.registries import default_cfg
from sfx.experiment import (checkpoint_dir, list_checkpoints, load_latest_checkpoint, save_checkpoint,
                            save_milestone)


@pytest.fixture
def cfg(tmp_path):
    return default_cfg(train_dir=tmp_path, experiment="exp", keep_checkpoints=2)


def state(train_step, env_steps=None):
    return {"model": {"w": torch.full((2,), float(train_step))}, "optimizer": {}, "train_step": train_step,
            "env_steps": env_steps if env_steps is not None else train_step * 100, "policy_version": train_step,
            "cfg": {"rollout": 32}}


def test_name_and_content(cfg):
    path = save_checkpoint(cfg, 0, state(7, 12345))
    assert path == checkpoint_dir(cfg, 0) / "checkpoint_000000007_12345.pth"
    loaded = load_latest_checkpoint(cfg, 0)
    assert loaded["train_step"] == 7 and loaded["env_steps"] == 12345
    assert torch.equal(loaded["model"]["w"], torch.full((2,), 7.0))


def test_prunes_to_keep_newest(cfg):
    for step in (1, 2, 3, 4):
        save_checkpoint(cfg, 0, state(step))
    assert [p.name for p in list_checkpoints(checkpoint_dir(cfg, 0))] == [
        "checkpoint_000000004_400.pth", "checkpoint_000000003_300.pth"]


def test_policies_have_separate_folders(cfg):
    save_checkpoint(cfg, 0, state(1))
    save_checkpoint(cfg, 1, state(5))
    assert load_latest_checkpoint(cfg, 0)["train_step"] == 1
    assert load_latest_checkpoint(cfg, 1)["train_step"] == 5


def test_order_is_by_train_step_number(tmp_path):
    for name in ("checkpoint_000000009_5.pth", "checkpoint_1000000000_7.pth", "checkpoint_000000010_6.pth",
                 "notes.txt", "checkpoint_x_1.pth"):
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in list_checkpoints(tmp_path)] == [
        "checkpoint_1000000000_7.pth", "checkpoint_000000010_6.pth", "checkpoint_000000009_5.pth"]
    assert list_checkpoints(tmp_path / "missing") == []


def test_none_when_nothing_saved(cfg):
    assert load_latest_checkpoint(cfg, 0) is None


def test_leftover_temp_file_is_ignored(cfg):
    save_checkpoint(cfg, 0, state(1))
    # what a save killed before its os.replace leaves behind
    (checkpoint_dir(cfg, 0) / ".checkpoint_000000002_200.pth.abc.tmp").write_bytes(b"half a zip")
    assert load_latest_checkpoint(cfg, 0)["train_step"] == 1
    assert len(list_checkpoints(checkpoint_dir(cfg, 0))) == 1


def test_save_leaves_no_temp_files(cfg):
    save_checkpoint(cfg, 0, state(1))
    assert [p.name for p in checkpoint_dir(cfg, 0).iterdir()] == ["checkpoint_000000001_100.pth"]


def test_corrupted_newest_falls_back_with_a_warning(cfg, caplog):
    save_checkpoint(cfg, 0, state(1))
    newest = save_checkpoint(cfg, 0, state(2))
    newest.write_bytes(newest.read_bytes()[:100])  # truncated, as after a full disk
    with caplog.at_level(logging.WARNING, logger="sfx.experiment.checkpoints"):
        loaded = load_latest_checkpoint(cfg, 0)
    assert loaded["train_step"] == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(str(newest) in w and "falling back" in w for w in warnings)


def test_not_a_checkpoint_dict_counts_as_corrupted(cfg, caplog):
    save_checkpoint(cfg, 0, state(1))
    path = save_checkpoint(cfg, 0, state(2))
    torch.save([1, 2, 3], path)
    with caplog.at_level(logging.WARNING, logger="sfx.experiment.checkpoints"):
        assert load_latest_checkpoint(cfg, 0)["train_step"] == 1


def test_all_corrupted_is_an_error(cfg):
    for step in (1, 2):
        save_checkpoint(cfg, 0, state(step)).write_bytes(b"garbage")
    with pytest.raises(ConfigError, match=r"all 2 checkpoints in .*checkpoint_p0 are unreadable"):
        load_latest_checkpoint(cfg, 0)


def test_map_location(cfg):
    save_checkpoint(cfg, 0, state(1))
    assert load_latest_checkpoint(cfg, 0, map_location="cpu")["model"]["w"].device.type == "cpu"


def test_milestones_are_copies_never_pruned(cfg):
    paths = [save_checkpoint(cfg, 0, state(step)) for step in (1, 2, 3)]
    milestone = save_milestone(cfg, 0, paths[-1])
    save_milestone(cfg, 0, paths[1])
    for step in (4, 5, 6):
        save_checkpoint(cfg, 0, state(step))
    milestones = checkpoint_dir(cfg, 0) / "milestones"
    assert milestone == milestones / "checkpoint_000000003_300.pth"
    assert sorted(p.name for p in milestones.iterdir()) == ["checkpoint_000000002_200.pth",
                                                            "checkpoint_000000003_300.pth"]
    assert torch.load(milestone, weights_only=False)["train_step"] == 3
    # milestones do not count as checkpoints to resume from
    assert load_latest_checkpoint(cfg, 0)["train_step"] == 6
