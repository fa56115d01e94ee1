"""sfx.export: the exported acting model (ONNX through onnxruntime, TorchScript through torch.jit) acts as
the torch model does, step after step with its state fed back, and the command line finds the experiment,
writes the files and their JSON, and names what is missing.

The reference is the torch model as sfx.enjoy --deterministic runs it: ``forward_step``, then the mode of
``make_action_distribution``. Models are untrained (no training needed), with their normalizers' statistics
moved away from the identity so the preprocessing inside the graph is checked too.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from sfx import export as export_module
from sfx.agents.appo import APPOActingRule
from sfx.algo.distributions import action_shape, make_action_distribution
from sfx.cfg import ConfigError
from sfx.registries import default_cfg, parse_args
from sfx.envs import make_env
from sfx.experiment import load_latest_checkpoint, save_best_checkpoint
from sfx.models import create_actor_critic
from sfx.models.export import export_model
from sfx.models.obs import ACTION_MASK_KEY, PREV_ACTION_KEY, PREV_REWARD_KEY, obs_spec
from tests.untrained_experiment import write_untrained_experiment

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models on a shared 2-core machine: one torch thread is the fastest."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


TRXL = dict(rnn_type="trxl", mem_len=3, n_layer=2, n_heads=2, d_head=4, d_inner=16)
STEPS = 6
TOL = dict(rtol=1e-5, atol=1e-5)


def vector(dim: int) -> gym.spaces.Box:
    return gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32)


def image(shape: tuple) -> gym.spaces.Box:
    return gym.spaces.Box(0, 255, shape, np.uint8)


def random_obs(space: gym.Space, batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A batch as the buffers hold it: uint8 frames, float vectors, 0/1 action masks."""
    out = {}
    for key, (shape, dtype) in obs_spec(space).items():
        if key == ACTION_MASK_KEY:
            out[key] = (rng.random((batch, *shape)) < 0.6).astype(dtype)
        elif np.issubdtype(dtype, np.integer):
            out[key] = rng.integers(0, 256, (batch, *shape)).astype(dtype)
        else:
            out[key] = (rng.normal(size=(batch, *shape)) * 3.0 + 1.0).astype(dtype)
    return out


def make_model(obs_space: gym.Space, action_space: gym.Space, num_tasks: int = 1, **overrides):
    """A small untrained model whose input (and return / PopArt) statistics are not the identity."""
    flags = dict(device="cpu", mixed_precision="off", hidden_size=16, normalize_input=True, normalize_returns=True,
                 encoder_type="conv", encoder_subtype="convnet_simple")
    cfg = default_cfg("gym_CartPole-v1", **{**flags, **overrides})
    torch.manual_seed(1)
    model = create_actor_critic(cfg, obs_space, action_space, num_tasks)
    rng = np.random.default_rng(1)
    with torch.no_grad():
        model.update_obs_normalizer({k: torch.from_numpy(v) for k, v in random_obs(obs_space, 64, rng).items()})
        if model.returns_normalizer is not None:
            model.returns_normalizer.update(torch.randn(64) * 3.0 + 2.0)
        if model.popart is not None:
            model.popart.mu.copy_(torch.randn(num_tasks, dtype=torch.float64))
            model.popart.sigma_.copy_(torch.rand(num_tasks, dtype=torch.float64) + 0.5)
    return model.eval()


def onnx_runner(path: Path, spec: dict):
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1  # tiny graphs: threads only add contention
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    # the JSON tells the truth about the file
    assert [i.name for i in session.get_inputs()] == [i["name"] for i in spec["inputs"]]
    assert [o.name for o in session.get_outputs()] == [o["name"] for o in spec["outputs"]]
    for got, told in zip(session.get_inputs(), spec["inputs"]):
        assert got.type == f"tensor({told['dtype'].replace('float32', 'float').replace('float64', 'double')})"
        assert [d if isinstance(d, int) else "batch" for d in got.shape] == told["shape"]

    def run(feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip([o["name"] for o in spec["outputs"]], session.run(None, feed)))

    return run


def torchscript_runner(path: Path, spec: dict):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit points at torch.export; the file still loads
        module = torch.jit.load(str(path))
    names = [i["name"] for i in spec["inputs"]]

    def run(feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with torch.no_grad():
            out = module(*[torch.from_numpy(feed[n]) for n in names])
        return {o["name"]: x.numpy() for o, x in zip(spec["outputs"], out)}

    return run


RUNNERS = {"onnx": onnx_runner, "torchscript": torchscript_runner}


def check_acts_like_torch(model, run, spec: dict, batch: int = 3, steps: int = STEPS, reset=(2, 0)) -> None:
    """Step the exported model and the torch model side by side, each fed back its own state (and memory,
    previous action and reward), row ``reset[1]`` starting a new episode before step ``reset[0]``."""
    rng = np.random.default_rng(7)
    space = model.action_space
    init = np.asarray(spec["initial_rnn_states"], dtype=np.float32)
    np.testing.assert_array_equal(init, model.initial_rnn_states(1)[0].numpy())
    states = {"torch": np.tile(init, (batch, 1)), "export": np.tile(init, (batch, 1))}
    memory = None
    if spec["memory"] is not None:
        memory = {side: np.zeros((batch, spec["memory"]["rows"], spec["memory"]["width"]), np.float32)
                  for side in states}
    prev_action = np.zeros((batch, action_shape(space)), np.float32)
    prev_reward = np.zeros((batch, 1), np.float32)
    tasks = np.arange(batch, dtype=np.int64) % model.num_tasks
    for t in range(steps):
        if t == reset[0]:
            for side in states:
                states[side][reset[1]] = init
            prev_action[reset[1]] = prev_reward[reset[1]] = 0.0
        obs = random_obs(model.obs_space, batch, rng)
        if model.prev_action_reward:
            obs.update({PREV_ACTION_KEY: prev_action.copy(), PREV_REWARD_KEY: prev_reward.copy()})
        feed = {**obs, "rnn_states": states["export"]}
        if memory is not None:
            feed["memory"] = memory["export"]
        if "tasks" in [i["name"] for i in spec["inputs"]]:
            feed["tasks"] = tasks
        got = run(feed)

        with torch.no_grad():
            ref = model.forward_step({k: torch.from_numpy(v) for k, v in obs.items()},
                                     torch.from_numpy(states["torch"]),
                                     torch.from_numpy(tasks) if model.num_tasks > 1 else None,
                                     None if memory is None else torch.from_numpy(memory["torch"]))
            ref_actions = make_action_distribution(space, ref["action_params"]).mode().numpy()
        assert got["actions"].dtype == ref_actions.dtype
        if isinstance(space, gym.spaces.Box):  # the mean
            np.testing.assert_allclose(got["actions"], ref_actions, **TOL, err_msg=f"step {t}")
        else:  # the same choices
            np.testing.assert_array_equal(got["actions"], ref_actions, err_msg=f"step {t}")
        np.testing.assert_allclose(got["action_params"], ref["action_params"].numpy(), **TOL, err_msg=f"step {t}")
        np.testing.assert_allclose(got["values"], ref["values"].numpy(), **TOL, err_msg=f"step {t}")
        np.testing.assert_allclose(got["new_rnn_states"], ref["new_rnn_states"].numpy(), **TOL, err_msg=f"step {t}")
        states = {"torch": ref["new_rnn_states"].numpy(), "export": got["new_rnn_states"]}
        if memory is not None:
            np.testing.assert_array_equal(got["memory_index"], ref["memory_index"].numpy())
            np.testing.assert_allclose(got["memory_entry"], ref["memory_entry"].numpy(), **TOL)
            rows = np.arange(batch)
            memory["torch"][rows, ref["memory_index"].numpy()] = ref["memory_entry"].numpy()
            memory["export"][rows, got["memory_index"]] = got["memory_entry"]
        offset = 0.0 if isinstance(space, gym.spaces.Box) else 1.0
        prev_action = ref_actions.astype(np.float32).reshape(batch, -1) + offset
        prev_reward = rng.normal(size=(batch, 1)).astype(np.float32)


# name -> (observation space, action space, num_tasks, flags): between them every core, observation kind and
# action space, and the model options that change the graph
MODELS = {
    "vector_gru": (vector(4), gym.spaces.Discrete(2), 1, {}),
    "image_lstm": (image((36, 36, 3)), gym.spaces.Discrete(3, start=1), 1,
                   dict(rnn_type="lstm", rnn_num_layers=2, obs_subtract_mean=100.0, obs_scale=64.0)),
    "no_core_continuous": (vector(5), gym.spaces.Box(-1.0, 1.0, (2,), np.float32), 1,
                           dict(use_rnn=False, adaptive_stddev=False, initial_stddev=0.5)),
    "trxl": (vector(4), gym.spaces.Discrete(3), 1, TRXL),
    "trxl_separate_gtrxl": (vector(4), gym.spaces.Box(-2.0, 2.0, (3,), np.float32), 1,
                            dict(TRXL, trxl_gate="gru", actor_critic_share_weights=False)),
    "dict_mask_prev_action_separate": (
        gym.spaces.Dict({"frame": image((3, 36, 36)), "measurements": vector(3),
                         ACTION_MASK_KEY: gym.spaces.Box(0, 1, (7,), np.float32)}),
        gym.spaces.MultiDiscrete([3, 4]), 1,
        dict(use_prev_action_reward=True, actor_critic_share_weights=False)),
    "tuple_popart_tasks": (vector(6), gym.spaces.Tuple([gym.spaces.Discrete(2), gym.spaces.Discrete(3)]), 3,
                           dict(popart=True, use_prev_action_reward=True)),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_onnx_acts_like_the_torch_model(tmp_path, name):
    obs_space, action_space, num_tasks, flags = MODELS[name]
    model = make_model(obs_space, action_space, num_tasks, **flags)
    spec = export_model(model, tmp_path / "model.onnx", "onnx", rule=APPOActingRule(model.action_space))
    assert spec == json.loads((tmp_path / "model.json").read_text())
    run = onnx_runner(tmp_path / "model.onnx", spec)
    check_acts_like_torch(model, run, spec, batch=3)  # exported with a batch of 2: the batch axis is free
    check_acts_like_torch(model, run, spec, batch=1, steps=2, reset=(-1, 0))


@pytest.mark.parametrize("name", ["vector_gru", "trxl"])
def test_torchscript_acts_like_the_torch_model(tmp_path, name):
    obs_space, action_space, num_tasks, flags = MODELS[name]
    model = make_model(obs_space, action_space, num_tasks, **flags)
    spec = export_model(model, tmp_path / "model.pt", "torchscript", rule=APPOActingRule(model.action_space))
    check_acts_like_torch(model, torchscript_runner(tmp_path / "model.pt", spec), spec, batch=4)


def test_the_spec_names_inputs_outputs_and_how_to_step(tmp_path):
    obs_space, action_space, num_tasks, flags = MODELS["dict_mask_prev_action_separate"]
    model = make_model(obs_space, action_space, num_tasks, **{**flags, **TRXL})
    spec = export_model(model, tmp_path / "m.onnx", "onnx", rule=APPOActingRule(model.action_space))
    inputs = {i["name"]: (i["shape"], i["dtype"]) for i in spec["inputs"]}
    # observation keys sorted as the buffers keep them, uint8 frames as uint8, then the state
    assert list(inputs) == [ACTION_MASK_KEY, "frame", "measurements", PREV_ACTION_KEY, PREV_REWARD_KEY,
                            "rnn_states", "memory"]
    assert inputs["frame"] == (["batch", 3, 36, 36], "uint8")
    assert inputs[PREV_ACTION_KEY] == (["batch", 2], "float32")
    assert inputs["rnn_states"] == (["batch", 4], "float32")  # [valid, pos] of the actor's and the critic's core
    assert inputs["memory"] == (["batch", 4, 2 * 2 * 16], "float32")  # mem_len + 1 rows, both trunks' layers
    outputs = {o["name"]: (o["shape"], o["dtype"]) for o in spec["outputs"]}
    assert outputs == {"actions": (["batch", 2], "int64"), "action_params": (["batch", 7], "float32"),
                       "values": (["batch"], "float32"), "new_rnn_states": (["batch", 4], "float32"),
                       "memory_entry": (["batch", 64], "float32"), "memory_index": (["batch"], "int64")}
    assert spec["memory"] == {"rows": 4, "width": 64, "initial": "zeros"}
    assert spec["initial_rnn_states"] == [0.0, 0.0, 0.0, 0.0]
    assert spec["action_space"]["type"] == "MultiDiscrete" and spec["action_space"]["nvec"] == [3, 4]
    assert spec["action_params"]["layout"] == "logits" and spec["action_params"]["sizes"] == [3, 4]
    step = " ".join(spec["step"])
    assert "memory_index" in step and "initial_rnn_states" in step and "actions + 1" in step
    assert spec["file"] == "m.onnx" and spec["format"] == "onnx"


def test_box_bounds_in_the_spec_are_json_numbers_or_null(tmp_path):
    space = gym.spaces.Box(np.array([-1.0, -np.inf], np.float32), np.array([1.0, np.inf], np.float32))
    model = make_model(vector(3), space, use_rnn=False)
    spec = export_model(model, tmp_path / "m.onnx", "onnx", rule=APPOActingRule(model.action_space))
    assert spec["action_space"]["low"] == [-1.0, None] and spec["action_space"]["high"] == [1.0, None]
    json.loads((tmp_path / "m.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))


def test_export_leaves_the_callers_model_as_it_was(tmp_path):
    model = make_model(vector(4), gym.spaces.Discrete(2)).train()
    export_model(model, tmp_path / "m.pt", "torchscript", rule=APPOActingRule(model.action_space))
    assert model.training and all(p.requires_grad for p in model.parameters())


# ----- the command line ----------------------------------------------------------------------------------

def make_experiment(train_dir: Path, env: str, *flags: str, checkpoint: bool = True) -> list[str]:
    """An experiment folder as training leaves it (cfg.json + one checkpoint of an untrained model); returns
    the flags that point at it (without --env: sfx.export reads it from cfg.json)."""
    return write_untrained_experiment(train_dir, env, "export_test", *flags, checkpoint=checkpoint, train_step=5,
                                      env_steps=640)


def checkpoint_model(env: str, where: list[str]):
    """The torch model of the experiment's newest checkpoint, float32 as sfx.export builds it."""
    cfg = parse_args([f"--env={env}", *where, "--mixed_precision=off"], evaluation=True)
    probe = make_env(cfg)
    model = create_actor_critic(cfg, probe.observation_space, probe.action_space)
    probe.close()
    model.load_state_dict(load_latest_checkpoint(cfg, 0)["model"])
    return model.eval()


def test_cli_exports_the_newest_checkpoint_to_onnx_in_the_experiment(tmp_path, capsys):
    where = make_experiment(tmp_path, "gym_CartPole-v1")
    assert export_module.main([*where, "--format=onnx"]) == 0  # no --env: the saved cfg names it
    model_path = tmp_path / "export_test" / "export" / "model_p0.onnx"
    spec_path = model_path.with_suffix(".json")
    assert model_path.is_file() and spec_path.is_file()
    out = capsys.readouterr().out
    assert str(model_path) in out and str(spec_path) in out
    spec = json.loads(spec_path.read_text())
    assert spec["env"] == "gym_CartPole-v1" and spec["policy_index"] == 0
    assert spec["checkpoint"].endswith("checkpoint_p0/checkpoint_000000005_640.pth")
    assert (spec["env_steps"], spec["train_step"]) == (640, 5)
    assert [i["name"] for i in spec["inputs"]] == ["obs", "rnn_states"]
    assert spec["action_space"] == {"type": "Discrete", "n": 2, "start": 0, "to_env": "actions[b, 0] + start"}
    model = checkpoint_model("gym_CartPole-v1", where)
    check_acts_like_torch(model, onnx_runner(model_path, spec), spec)


def test_cli_exports_a_doom_model_with_uint8_frames(tmp_path):
    pytest.importorskip("vizdoom")
    pytest.importorskip("cv2")
    where = make_experiment(tmp_path, "doom_basic", "--rnn_type=lstm")
    assert export_module.main([*where, "--env=doom_basic"]) == 0
    path = tmp_path / "export_test" / "export" / "model_p0.onnx"
    spec = json.loads(path.with_suffix(".json").read_text())
    frame = spec["inputs"][0]
    assert frame["name"] == "obs" and frame["dtype"] == "uint8" and len(frame["shape"]) == 4
    model = checkpoint_model("doom_basic", where)
    check_acts_like_torch(model, onnx_runner(path, spec), spec, batch=2, steps=3)


def test_cli_torchscript_of_continuous_actions_to_an_output_folder(tmp_path):
    where = make_experiment(tmp_path, "gym_Pendulum-v1")
    out_dir = tmp_path / "deploy"
    out_dir.mkdir()
    assert export_module.main([*where, "--format=torchscript", f"--output={out_dir}"]) == 0
    path = out_dir / "model_p0.pt"
    spec = json.loads(path.with_suffix(".json").read_text())
    assert spec["format"] == "torchscript" and spec["action_space"]["type"] == "Box"
    assert spec["action_params"]["layout"] == "mean_log_std"
    model = checkpoint_model("gym_Pendulum-v1", where)
    check_acts_like_torch(model, torchscript_runner(path, spec), spec)


def test_cli_output_names_the_model_file(tmp_path):
    where = make_experiment(tmp_path, "gym_CartPole-v1")
    target = tmp_path / "elsewhere" / "cartpole.onnx"
    result = export_module.export(parse_args(["--env=gym_CartPole-v1", *where], evaluation=True), "onnx", str(target))
    assert result["model_path"] == str(target) and target.is_file()
    assert result["spec_path"] == str(tmp_path / "elsewhere" / "cartpole.json")
    assert json.loads(Path(result["spec_path"]).read_text())["file"] == "cartpole.onnx"


def test_missing_experiment_names_the_folder(tmp_path, capsys):
    where = ["--experiment=nothing_here", f"--train_dir={tmp_path}"]
    assert export_module.main(where) == 2
    err = capsys.readouterr().err
    assert err.startswith("sfx: error: no experiment at ") and str(tmp_path / "nothing_here") in err
    assert export_module.main(["--env=gym_CartPole-v1", *where]) == 2  # the cfg parser says it with --env too
    assert str(tmp_path / "nothing_here") in capsys.readouterr().err


def test_missing_checkpoint_names_the_checkpoint_folder(tmp_path, capsys):
    where = make_experiment(tmp_path, "gym_CartPole-v1", checkpoint=False)
    assert export_module.main(where) == 2
    err = capsys.readouterr().err
    assert err.startswith("sfx: error: no checkpoint in ") and str(tmp_path / "export_test" / "checkpoint_p0") in err
    assert "Traceback" not in err
    assert not (tmp_path / "export_test" / "export").exists()


def test_unknown_format_is_a_clear_error(tmp_path, capsys):
    where = make_experiment(tmp_path, "gym_CartPole-v1", checkpoint=False)
    assert export_module.main([*where, "--format=tflite"]) == 2
    err = capsys.readouterr().err
    assert "--format=tflite" in err and "onnx, torchscript" in err
    with pytest.raises(ConfigError, match="spec file"):
        where = make_experiment(tmp_path, "gym_CartPole-v1")
        export_module.export(parse_args(["--env=gym_CartPole-v1", *where], evaluation=True), "onnx",
                             str(tmp_path / "model.json"))


def test_best_checkpoint_kind_exports_the_best_weights(tmp_path, capsys):
    where = make_experiment(tmp_path, "gym_CartPole-v1")
    assert export_module.main([*where, "--load_checkpoint_kind=best"]) == 2
    best = tmp_path / "export_test" / "checkpoint_p0" / "best" / "best.pth"
    assert f"no best checkpoint {best}" in capsys.readouterr().err
    cfg = parse_args(["--env=gym_CartPole-v1", *where, "--load_checkpoint_kind=best"], evaluation=True)
    model = checkpoint_model("gym_CartPole-v1", where)
    save_best_checkpoint(cfg, 0, {"model": model.state_dict(), "metric": "eval/reward", "value": 9.0, "env_steps": 320})
    spec = export_module.export(cfg)["spec"]
    assert spec["checkpoint"] == str(best) and spec["env_steps"] == 320
