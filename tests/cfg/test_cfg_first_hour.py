"""The parser's answers to a newcomer's first tries (issue 57): --device spellings and the machine's default,
--algo in any case, resuming with another --env, and the Python API's errors in keyword terms."""

import logging
import os
import traceback

import pytest
import torch

import sfx
from sfx import train as train_module
from sfx.cfg import ConfigError
from sfx.registries import parse_args
from sfx.cfg.api_terms import in_python_terms
from sfx.cfg.parsing import place_device
from tests.untrained_experiment import write_untrained_experiment

CARTPOLE = "--env=gym_CartPole-v1"


@pytest.fixture
def tdir(tmp_path):
    return f"--train_dir={tmp_path}"


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def visible(monkeypatch):
    """CUDA_VISIBLE_DEVICES as the test sets it, restored afterwards (place_device writes os.environ)."""
    # setenv first so the undo restores the variable's original state even when it was unset: a bare
    # delenv of an absent variable records nothing, and place_device's write would outlive the test
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    return monkeypatch


# ------------------------------------------------------------------ --device

@pytest.mark.parametrize("spelling", ["gpu", "cuda", "CUDA", "GPU"])
def test_cuda_is_the_gpu(tdir, spelling):
    assert parse_args([CARTPOLE, tdir, f"--device={spelling}"]).device == "gpu"


def test_cuda_n_is_gpu_n_alone_for_this_process_and_its_workers(tdir, visible):
    cfg = parse_args([CARTPOLE, tdir, "--device=cuda:1"])
    assert cfg.device == "gpu" and os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    visible.setenv("CUDA_VISIBLE_DEVICES", "4,5")  # N counts the GPUs a launcher left visible
    assert parse_args([CARTPOLE, tdir, "--device=cuda:1"]).device == "gpu"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"


def test_cuda_n_beyond_the_visible_gpus_and_other_devices_are_one_line_errors(tdir, visible):
    visible.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    with pytest.raises(ConfigError, match=r"^--device=cuda:2: CUDA_VISIBLE_DEVICES=4,5 shows 2 GPU\(s\); allowed: "
                                          r"cuda:0 to cuda:1, gpu, cpu$"):
        parse_args([CARTPOLE, tdir, "--device=cuda:2"])
    with pytest.raises(ConfigError, match=r"'tpu' is not a device; allowed: gpu \(or cuda\), cuda:N \(GPU N\), cpu"):
        parse_args([CARTPOLE, tdir, "--device=tpu"])


def test_cuda_n_after_cuda_started_says_how_to_pick_the_gpu(tdir, visible):
    visible.setattr(torch.cuda, "is_initialized", lambda: True)
    with pytest.raises(ConfigError, match="CUDA already started in this process: set CUDA_VISIBLE_DEVICES=3"):
        parse_args([CARTPOLE, tdir, "--device=cuda:3"])


def test_left_out_the_device_is_the_machine_s_without_the_fallback_warning(tdir, no_cuda, caplog):
    from sfx.engine.wiring import resolve_device

    cfg = parse_args([CARTPOLE, tdir])
    assert cfg.device == "cpu"
    with caplog.at_level(logging.WARNING):
        assert resolve_device(cfg, warn=True).type == "cpu"
    assert "CUDA is not available" not in caplog.text
    # asked for, the GPU that is not there is still said
    for asked in ("gpu", "cuda"):
        cfg = parse_args([CARTPOLE, tdir, f"--device={asked}"])
        with caplog.at_level(logging.WARNING):
            resolve_device(cfg, warn=True)
        assert "--device=gpu but CUDA is not available here: using the CPU" in caplog.text


def test_a_device_the_saved_run_did_not_choose_is_picked_again_by_the_resuming_machine(tmp_path, monkeypatch):
    from sfx.experiment import experiment_dir, save_cfg

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # started on a laptop
    for name, flags in (("laptop", []), ("chosen", ["--device=cpu"])):
        cfg = parse_args([CARTPOLE, f"--experiment={name}", f"--train_dir={tmp_path}", *flags])
        assert cfg.device == "cpu"
        experiment_dir(cfg).mkdir(parents=True)
        save_cfg(cfg)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # resumed on a workstation with a GPU
    assert parse_args([CARTPOLE, "--experiment=laptop", f"--train_dir={tmp_path}"]).device == "gpu"
    assert parse_args([CARTPOLE, "--experiment=chosen", f"--train_dir={tmp_path}"]).device == "cpu"


def test_place_device_leaves_an_explicit_choice_alone(no_cuda):
    cfg = type("Cfg", (), {"device": "gpu"})()
    place_device(cfg, asked=True)
    assert cfg.device == "gpu"  # the engine falls back and says so


# ------------------------------------------------------------------ --algo

@pytest.mark.parametrize("typed, registered", [("appo", "APPO"), ("Sac", "SAC"), ("r2d2", "R2D2"), ("APPO", "APPO")])
def test_algo_in_any_case_is_the_registered_agent(tdir, typed, registered):
    cfg = parse_args([CARTPOLE, tdir, f"--algo={typed}"])
    assert cfg.algo == registered


def test_a_near_miss_of_an_algo_suggests_the_agent(tdir, capsys):
    with pytest.raises(ConfigError, match=r"^--algo=ppo is not a registered algorithm; allowed: .*APPO.*; "
                                          r"did you mean --algo=APPO\?$"):
        parse_args([CARTPOLE, tdir, "--algo=ppo"])
    assert train_module.main([CARTPOLE, tdir, "--algo=ppo"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean --algo=APPO?" in err
    assert train_module.requested_algo(["--algo=dummy_sampler"]) == "DUMMY_SAMPLER"  # its own entry point


# ------------------------------------------------------------------ another --env on resume

def test_resuming_with_another_env_is_one_line_at_start(tmp_path, capsys):
    where = write_untrained_experiment(tmp_path, "gym_CartPole-v1", "cartpole", checkpoint=False)
    with pytest.raises(ConfigError) as info:
        parse_args(["--env=gym_Acrobot-v1", *where])
    message = str(info.value)
    assert message.startswith(f"--env=gym_Acrobot-v1 cannot resume experiment {tmp_path / 'cartpole'}, trained on "
                              f"--env=gym_CartPole-v1: ")
    assert "another --experiment" in message and "\n" not in message
    assert train_module.main(["--env=gym_Acrobot-v1", *where]) == 2
    assert capsys.readouterr().err.startswith("sfx: error: --env=gym_Acrobot-v1 cannot resume")
    # the saved env, and a fresh start under another name, are fine
    assert parse_args([CARTPOLE, *where]).env == "gym_CartPole-v1"
    assert parse_args(["--env=gym_Acrobot-v1", "--experiment=acrobot", f"--train_dir={tmp_path}"]).env == \
        "gym_Acrobot-v1"


def test_an_evaluation_may_play_another_env_with_a_warning(tmp_path, caplog):
    where = write_untrained_experiment(tmp_path, "gym_CartPole-v1", "cartpole", checkpoint=False)
    with caplog.at_level(logging.WARNING):
        assert parse_args(["--env=gym_Acrobot-v1", *where], evaluation=True).env == "gym_Acrobot-v1"
    assert "differs from env gym_CartPole-v1" in caplog.text


# ------------------------------------------------------------------ the Python API's errors

def test_an_unknown_keyword_of_sfx_train_is_one_line_in_keyword_terms(tmp_path):
    with pytest.raises(ConfigError) as info:
        sfx.train(env="gym_CartPole-v1", experiment="bad", train_dir=str(tmp_path), num_workerz=2)
    assert str(info.value) == ("sfx.train() got an unexpected keyword argument 'num_workerz' (did you mean "
                               "num_workers, num_envs_per_worker?); its keywords are the flags of python -m "
                               "sfx.train --help")
    # the traceback is the caller's line and train's raise, not the parser's frames
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert frames == ["test_an_unknown_keyword_of_sfx_train_is_one_line_in_keyword_terms", "train"], frames
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert not (tmp_path / "bad").exists()


def test_a_bad_value_from_python_names_the_keyword(tmp_path):
    with pytest.raises(ConfigError, match=r"^num_workers=0 must be a positive integer \(> 0\)$"):
        sfx.train(env="gym_CartPole-v1", experiment="bad", train_dir=str(tmp_path), num_workers=0)
    with pytest.raises(ConfigError, match=r"^sfx.evaluate\(\) got an unexpected keyword argument 'max_num_episodez'"):
        sfx.evaluate(env="gym_CartPole-v1", experiment="bad", train_dir=str(tmp_path), max_num_episodez=3)


def test_a_command_line_quoted_as_advice_keeps_its_flags():
    error = ConfigError("no experiment at /x (no cfg.json): train first, e.g. python -m sfx.train --env=gym_X "
                        "--experiment=x --train_dir=/t; or set --train_dir")
    assert str(in_python_terms(error, "sfx.evaluate", "python -m sfx.enjoy")) == (
        "no experiment at /x (no cfg.json): train first, e.g. python -m sfx.train --env=gym_X --experiment=x "
        "--train_dir=/t; or set train_dir")
