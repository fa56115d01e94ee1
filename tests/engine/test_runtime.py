"""The component seam: any object with start / process / tick / finish, declared by a ComponentSpec,
runs under both runtimes through the one loop; control messages are read before data."""

import time

import pytest
import torch

from sfx.registries import default_cfg
from sfx.engine.runtime import ProcessRuntime, SerialRuntime
from sfx.engine.wiring import ComponentSpec, probe_env, wire
from sfx.models import create_actor_critic
from tests.engine.echo_component import CRASH, build_echo


def echo_wiring(tmp_path, serial):
    cfg = default_cfg(env="gym_CartPole-v1", train_dir=str(tmp_path), experiment="echo", num_workers=1,
                      num_envs_per_worker=2, hidden_size=16, device="cpu", serial_mode=serial)
    cfg.echo_marker_dir = str(tmp_path)  # read by the echo component's builder
    info = probe_env(cfg)
    model = create_actor_critic(cfg, info.observation_space, info.action_space)
    # the echo component reads policy 0's request queue as its inbox and its learner's control queue
    return wire(cfg, info, model, serial=serial, components=lambda w: (
        ComponentSpec("echo", 0, 0, build_echo, w.policy_queues[0], w.learner_control[0], heartbeat_deadline=False,
                      restartable=False),))


def test_serial_runtime_calls_the_interface_in_order_and_control_before_data(tmp_path):
    w = echo_wiring(tmp_path, serial=True)
    runtime = SerialRuntime(w, torch.device("cpu"))
    runtime.start()
    (_, comp), = runtime.parts
    w.policy_queues[0].put(("data", 1))
    w.learner_control[0].put(("control", 2))
    reports = runtime.step()
    assert [r[2]["kind"] for r in reports] == ["control", "data"]
    assert comp.calls == ["start", ("process", ["control"]), ("process", ["data"])] and comp.ticks == 1
    runtime.stop(lambda reports: None)
    assert comp.calls[-1] == "finish"
    assert (tmp_path / "echo_0.finished").read_text() == "ticks 1\n"


def _collect(runtime, kinds, timeout_sec=30.0):
    got, deadline = [], time.time() + timeout_sec
    while time.time() < deadline and not all(any(r[0] == k for r in got) for k in kinds):
        got += runtime.step()
    return got


def test_process_runtime_runs_a_custom_component_and_finishes_it_after_a_crash(tmp_path):
    w = echo_wiring(tmp_path, serial=False)
    runtime = ProcessRuntime(w)
    runtime.start()
    try:
        w.learner_control[0].put(("control", 7))
        w.policy_queues[0].put(("data", 8))
        got = _collect(runtime, ["echo"])
        got += _collect(runtime, ["never"], timeout_sec=1.0)
        echoed = [(r[1], r[2]["kind"], r[2]["payload"]) for r in got if r[0] == "echo"]
        assert sorted(echoed) == [("echo_0", "control", 7), ("echo_0", "data", 8)]
        w.policy_queues[0].put((CRASH, None))
        got = _collect(runtime, ["error", "stopped"])
        assert [r[1] for r in got if r[0] in ("error", "stopped")] == ["echo_0", "echo_0"]
        error = next(r for r in got if r[0] == "error")
        assert "asked to crash" in error[2]
        # finish ran after the crash (a learner saves its checkpoint there)
        assert (tmp_path / "echo_0.finished").read_text().startswith("ticks ")
        deadline = time.time() + 10
        while runtime.dead_components() != ["echo_0"] and time.time() < deadline:
            time.sleep(0.05)
        assert runtime.dead_components() == ["echo_0"]
    finally:
        runtime.stop(lambda reports: None, timeout_sec=10)


@pytest.mark.parametrize("serial", [True, False], ids=["serial", "process"])
def test_a_wiring_is_frozen(tmp_path, serial):
    import dataclasses

    w = echo_wiring(tmp_path, serial=serial)
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.learner_queues = w.policy_queues
    assert [s.name for s in w.components] == ["echo_0"]
