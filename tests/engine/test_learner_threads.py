"""How many torch threads a learner gets (``--learner_main_loop_num_cores=0``: auto) and the serial runtime's
threads: an agent whose learner sets the pace (SAC) gets every core, an MLP APPO learner one, an image learner
what the workers leave free; several ranks on one machine divide its cores; the flag always wins."""

import os

import torch

from sfx.registries import default_cfg
from sfx.engine.runtime import SerialRuntime
from sfx.engine.wiring import learner_threads, probe_env, training_components, wire

CORES = len(os.sched_getaffinity(0))


def test_the_auto_rule_per_kind_of_learner():
    appo = default_cfg(env="gym_CartPole-v1", device="cpu", num_workers=1)
    assert learner_threads(appo, device="cpu", obs_ndim=1) == 1
    assert learner_threads(appo, device="cpu", obs_ndim=3) == max(1, CORES - 1)
    assert learner_threads(appo, device="cpu", obs_ndim=1, learner_sets_the_pace=True) == CORES
    # several ranks of one training on this machine share its cores
    assert learner_threads(appo, device="cpu", obs_ndim=1, learner_sets_the_pace=True, local_ranks=2) == max(1, CORES // 2)
    assert learner_threads(appo, device="cpu", obs_ndim=3, local_ranks=2) == max(1, CORES // 2 - 1)
    assert learner_threads(appo, device="cpu", obs_ndim=1, learner_sets_the_pace=True, local_ranks=4 * CORES) == 1
    assert learner_threads(appo, device="cuda", obs_ndim=3) == 1  # the maths runs on the GPU
    appo.learner_main_loop_num_cores = 3
    assert learner_threads(appo, device="cpu", obs_ndim=1) == 3
    assert learner_threads(appo, device="cpu", obs_ndim=1, learner_sets_the_pace=True) == 3
    assert learner_threads(appo, device="cpu", obs_ndim=1, learner_sets_the_pace=True, local_ranks=2) == 3


def _threads_of(cfg):
    info = probe_env(cfg)
    from sfx.agents import find_agent

    model = find_agent(cfg.algo).make_model(cfg, info.observation_space, info.action_space)
    w = wire(cfg, info, model, serial=cfg.serial_mode)
    return w, {s.role: s.threads for s in training_components(w)}


def test_sac_learners_get_every_core_and_appo_mlp_learners_one(tmp_path):
    sac = default_cfg(algo="SAC", env="gym_Pendulum-v1", device="cpu", num_workers=1, num_envs_per_worker=1,
                      train_dir=str(tmp_path), experiment="sac")
    _, threads = _threads_of(sac)
    assert threads["learner"] == CORES and threads["policy_worker"] == 1
    appo = default_cfg(env="gym_CartPole-v1", device="cpu", num_workers=1, num_envs_per_worker=2, hidden_size=16,
                       train_dir=str(tmp_path), experiment="appo")
    _, threads = _threads_of(appo)
    assert threads["learner"] == 1


def test_the_serial_runtime_runs_with_the_most_threads_a_component_asks(tmp_path):
    before = torch.get_num_threads()
    try:
        sac = default_cfg(algo="SAC", env="gym_Pendulum-v1", device="cpu", num_workers=1, num_envs_per_worker=1,
                          train_dir=str(tmp_path), experiment="sac", serial_mode=True)
        w, threads = _threads_of(sac)
        runtime = SerialRuntime(w, torch.device("cpu"))
        runtime.start()
        try:
            assert torch.get_num_threads() == max(threads.values()) == CORES
        finally:
            runtime.stop(lambda reports: None)
    finally:
        torch.set_num_threads(before)
