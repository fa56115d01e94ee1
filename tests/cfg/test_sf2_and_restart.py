"""Issue 38's command-line mistakes: experiment names outside --train_dir, resuming with another --algo,
Sample Factory 2 spellings, and SF2's --restart_behavior."""

import json
import subprocess
import sys

import pytest

from sfx.cfg import ConfigError
from sfx.registries import parse_args

SMALL = ["--num_workers=1", "--num_envs_per_worker=2", "--worker_num_splits=1", "--rollout=16", "--recurrence=8",
         "--batch_size=32", "--hidden_size=16", "--device=cpu", "--serial_mode=True", "--train_for_env_steps=300",
         "--seed=1"]


def _argv(tmp_path, *extra, experiment="e"):
    return ["--env=gym_CartPole-v1", f"--train_dir={tmp_path}", f"--experiment={experiment}", *extra]


@pytest.mark.parametrize("name", ["../x", "a/../../x", "/tmp/elsewhere", "~/x"])
def test_an_experiment_outside_the_train_dir_is_one_error(tmp_path, name):
    with pytest.raises(ConfigError, match=r"^--experiment=.* must be a folder name inside --train_dir="):
        parse_args(_argv(tmp_path / "td", experiment=name))
    assert not (tmp_path / "x").exists()


def test_subfolders_inside_the_train_dir_are_fine(tmp_path):
    assert parse_args(_argv(tmp_path, experiment="sweep/seed_1")).experiment == "sweep/seed_1"


def test_run_description_names_stay_folder_names():
    from sfx_runner.errors import RunnerError
    from sfx_runner.run_description import check_name

    for name in ("..", "../x", "/abs", "a/b", "."):
        with pytest.raises(RunnerError, match="is not allowed"):
            check_name(name, "run name")


def _save_cfg(tmp_path, experiment="e", **fields):
    folder = tmp_path / experiment
    folder.mkdir(parents=True)
    cfg = vars(parse_args(_argv(tmp_path, experiment=experiment)))
    cfg.update(fields)
    (folder / "cfg.json").write_text(json.dumps(cfg))


def test_resuming_with_another_algo_names_the_change(tmp_path):
    _save_cfg(tmp_path, algo="APPO")
    with pytest.raises(ConfigError) as e:
        parse_args(_argv(tmp_path, "--algo=SAC"))
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"--algo=SAC cannot resume experiment {tmp_path / 'e'}, trained with --algo=APPO")
    assert "--restart_behavior=restart" in message
    parse_args(_argv(tmp_path, "--algo=APPO"))  # the same algorithm resumes


def test_sf2_num_epochs_is_ppo_epochs(tmp_path):
    cfg = parse_args(_argv(tmp_path, "--num_epochs=3"))
    assert cfg.ppo_epochs == 3 and "num_epochs" not in vars(cfg)
    with pytest.raises(ConfigError, match=r"--num_epochs: is Sample Factory 2's name of --ppo_epochs"):
        parse_args(_argv(tmp_path, "--num_epochs=3", "--algo=SAC"))


@pytest.mark.parametrize("flag,same,other,points_to", [
    ("async_rl", "True", "False", "--serial_mode=True"),
    ("batched_sampling", "False", "True", "--num_envs_per_worker"),
    ("value_bootstrap", "True", "False", "truncated"),
])
def test_sf2_flags_with_sfx_meaning_are_accepted_and_others_point_to_sfx(tmp_path, flag, same, other, points_to):
    cfg = parse_args(_argv(tmp_path, f"--{flag}={same}"))
    assert flag not in vars(cfg)
    with pytest.raises(ConfigError) as e:
        parse_args(_argv(tmp_path, f"--{flag}={other}"))
    assert f"argument --{flag}: {other} is not supported" in str(e.value) and points_to in str(e.value)


def test_restart_behavior_values_are_checked(tmp_path):
    assert parse_args(_argv(tmp_path)).restart_behavior == "resume"
    with pytest.raises(ConfigError, match="--restart_behavior: invalid choice: 'again'"):
        parse_args(_argv(tmp_path, "--restart_behavior=again"))


def _train(tmp_path, *extra):
    return subprocess.run([sys.executable, "-m", "sfx.train", *_argv(tmp_path, *SMALL, *extra)], capture_output=True,
                          text=True, timeout=300)


def test_restart_keeps_the_old_folder_and_overwrite_deletes_it(tmp_path):
    first = _train(tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    (tmp_path / "e" / "marker").write_text("first run")
    again = _train(tmp_path, "--restart_behavior=restart", "--algo=APPO")
    assert again.returncode == 0, again.stderr[-2000:]
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("e_old_")]
    assert len(kept) == 1 and (kept[0] / "marker").read_text() == "first run"
    assert not (tmp_path / "e" / "marker").exists() and (tmp_path / "e" / "done").exists()
    # a different algo starts afresh with overwrite, where resume would refuse it
    (tmp_path / "e" / "marker").write_text("second run")
    refused = _train(tmp_path, "--algo=R2D2")
    assert refused.returncode == 2 and "cannot resume experiment" in refused.stderr
    last = _train(tmp_path, "--restart_behavior=overwrite", "--algo=R2D2", "--burn_in=4")
    assert last.returncode == 0, last.stderr[-2000:]
    assert not (tmp_path / "e" / "marker").exists()
    assert json.loads((tmp_path / "e" / "cfg.json").read_text())["algo"] == "R2D2"
