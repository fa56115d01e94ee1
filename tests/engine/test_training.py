"""End-to-end tests of the engine on CartPole: serial and asynchronous runs, the experiment
folder, policy lag, throttling, Ctrl+C and resume."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch

from sfx.registries import default_cfg
from sfx.engine import run_training
from sfx.engine.coordinator import build_component, give_back_slots, probe_env, wire
from sfx.engine.queues import drain
from sfx.models import create_actor_critic

REPO = Path(__file__).resolve().parents[2]


def small_cfg(tmp_path, **overrides):
    base = dict(env="gym_CartPole-v1", experiment="t", train_dir=str(tmp_path), num_workers=2,
                num_envs_per_worker=2, worker_num_splits=2, rollout=16, recurrence=8, batch_size=64,
                hidden_size=32, device="cpu", seed=1, train_for_env_steps=3000,
                experiment_summaries_interval=0.5, report_every_sec=1.0, save_every_sec=1000)
    base.update(overrides)
    return default_cfg(**base)


def worker_processes():
    """Live component processes: the forkserver's children and any other descendant that is not
    one of the stdlib's long-lived helpers (the forkserver itself, the resource tracker)."""
    helpers = ("forkserver", "resource_tracker")
    live = []
    for child in psutil.Process().children():
        if any(h in " ".join(child.cmdline()) for h in helpers):
            live += child.children(recursive=True)
        else:
            live += [child, *child.children(recursive=True)]
    return [p for p in live if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def shm_segments():
    """Named shared-memory objects; ViZDoom's are left out: these CartPole runs never make them,
    while a VizDoom run elsewhere on the machine may come and go during the test."""
    names = os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []
    return {n for n in names if not n.startswith("ViZDoom")}


@pytest.mark.skipif(torch.cuda.is_available(), reason="the fallback happens only without CUDA")
def test_gpu_fallback_is_said_once_per_run(tmp_path):
    """--device=gpu (the default) on a machine without CUDA: one warning for the run, not one per process."""
    result = run_training(small_cfg(tmp_path, device="gpu", policy_workers_per_policy=2))
    assert result["status"] == "done"
    log_text = (tmp_path / "t" / "sf_log.txt").read_text()
    assert log_text.count("CUDA is not available") == 1, log_text


def test_serial_run_fills_the_experiment_folder(tmp_path):
    cfg = small_cfg(tmp_path, serial_mode=True)
    result = run_training(cfg)
    assert (result["status"], result["stop_reason"]) == ("done", "train_for_env_steps")
    assert result["env_steps"] >= 3000
    exp = tmp_path / "t"
    assert json.loads((exp / "status.json").read_text())["stop_reason"] == "train_for_env_steps"
    assert (exp / "cfg.json").is_file()
    assert (exp / "done").is_file()
    assert "training done" in (exp / "sf_log.txt").read_text()
    assert list((exp / "checkpoint_p0").glob("checkpoint_*.pth"))
    assert list((exp / ".summary" / "0").glob("events.out.tfevents.*"))


def test_stop_at_reward_ends_the_run_as_done(tmp_path):
    # a random CartPole policy scores about 22 per episode: 10 is reached by the first 5 episodes
    cfg = small_cfg(tmp_path, serial_mode=True, train_for_env_steps=10_000_000, stop_at_reward=10.0, stats_avg=5)
    result = run_training(cfg)
    assert (result["status"], result["stop_reason"]) == ("done", "stop_at_reward")
    assert result["env_steps"] < 100_000
    assert (tmp_path / "t" / "done").is_file()
    assert "reached --stop_at_reward=10: done" in (tmp_path / "t" / "sf_log.txt").read_text()
    assert json.loads((tmp_path / "t" / "status.json").read_text())["stop_reason"] == "stop_at_reward"


TRXL = dict(rnn_type="trxl", mem_len=12, n_layer=2, n_heads=2, d_head=8, d_inner=32)


@pytest.mark.parametrize("rnn_type,use_rnn,extra", [
    ("lstm", True, {}), ("gru", True, {}), ("gru", False, {}),
    ("gru", True, {"use_prev_action_reward": True}),
    # Transformer-XL: the memory before each slot (copied at rollout boundaries), masks at episode starts
    ("trxl", True, TRXL),
    ("trxl", True, {**TRXL, "use_prev_action_reward": True, "trxl_gate": "gru"}),
    # two policies: an agent's next episode may belong to the other policy (its memory must not leak)
    ("trxl", True, {**TRXL, "num_policies": 2}),
])
def test_learner_recomputes_the_behaviour_policy(tmp_path, rnn_type, use_rnn, extra):
    """With (almost) frozen weights the learner's recomputation of every stored step, chunked by
    --recurrence with the stored states and resets at episode ends, must reproduce the policy
    workers' log-probs: ratio 1 and KL 0. This checks the whole slot/state bookkeeping."""
    overrides = dict(serial_mode=True, learning_rate=1e-12, normalize_input=False, use_rnn=use_rnn,
                     rnn_type=rnn_type, rollout=16, recurrence=4, train_for_env_steps=2000)
    overrides.update(extra)
    cfg = small_cfg(tmp_path, **overrides)
    result = run_training(cfg)
    assert len(result["train_stats"]) == cfg.num_policies
    for stats in result["train_stats"]:
        assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
        assert abs(stats["kl"]) < 1e-5


def test_the_running_advantage_statistics_are_checkpointed_and_resumed(tmp_path):
    """--advantage_normalization=running (auto's choice here) keeps learning state beside the optimizer's: every valid sample
    trained on is in the checkpoint's statistics, and a resumed run goes on from them (not afresh)."""
    cfg = small_cfg(tmp_path, serial_mode=True, train_for_env_steps=1500)
    run_training(cfg)
    first = torch.load(max((tmp_path / "t" / "checkpoint_p0").glob("*.pth")), weights_only=False)
    assert first["advantage_stats"]["count"].item() == first["env_steps"]  # serial: every sample valid, 1 epoch
    cfg = small_cfg(tmp_path, serial_mode=True, train_for_env_steps=3000)
    run_training(cfg)
    second = torch.load(max((tmp_path / "t" / "checkpoint_p0").glob("*.pth")), weights_only=False)
    assert second["env_steps"] > first["env_steps"]
    assert second["advantage_stats"]["count"].item() == second["env_steps"]
    minibatch = small_cfg(tmp_path / "m", serial_mode=True, train_for_env_steps=1000,
                          advantage_normalization="minibatch")
    run_training(minibatch)
    plain = torch.load(max((tmp_path / "m" / "t" / "checkpoint_p0").glob("*.pth")), weights_only=False)
    assert "advantage_stats" not in plain


def test_serial_mode_is_deterministic(tmp_path):
    a = run_training(small_cfg(tmp_path / "a", serial_mode=True, train_for_env_steps=1500))
    b = run_training(small_cfg(tmp_path / "b", serial_mode=True, train_for_env_steps=1500))
    sa = torch.load(next((tmp_path / "a" / "t" / "checkpoint_p0").glob("*.pth")), weights_only=False)
    sb = torch.load(next((tmp_path / "b" / "t" / "checkpoint_p0").glob("*.pth")), weights_only=False)
    assert a["env_steps"] == b["env_steps"]
    for k in sa["model"]:
        assert torch.equal(sa["model"][k], sb["model"][k]), k


def test_a_serial_run_acts_every_sample_with_the_weights_it_then_trains(tmp_path, monkeypatch):
    """--serial_mode is synchronous, as Stable-Baselines3's PPO is: each iteration's samples are acted by the weights
    and input statistics the learner holds when it starts training on them, so its recomputed log-probs are the
    behaviour's for every sample (no ratio off 1 before the first step). A finished trajectory goes to the learner
    before the next action is asked for: the first step of each trajectory used to be acted by the weights of the
    iteration before (a lag of one iteration on 1 sample in --rollout, log-probs off by up to 3.6 on HalfCheetah)."""
    import sfx.agents.appo.learning as appo
    from sfx.algo.distributions import make_action_distribution

    seen = []
    targets = appo.iteration_targets

    def checking(model, data, valids, cfg):
        n, T = data["rewards"].shape
        with torch.no_grad():
            out = model.forward_trajectories(data["obs"], data["rnn_states"], data["terminated"] | data["truncated"],
                                             T, None, None)
            dist = make_action_distribution(model.action_space, out.action_params.reshape(n * T, -1))
            log_probs = dist.log_prob(data["actions"].reshape(n * T, -1)).reshape(n, T)
        seen.append((float((log_probs - data["log_probs"])[valids].abs().max()), int(valids.sum()),
                     float(model.obs_normalizer.count)))
        return targets(model, data, valids, cfg)

    monkeypatch.setattr(appo, "iteration_targets", checking)
    # weights and input statistics that move a lot per iteration; CartPole's 500-step limit never cuts an episode
    # here, so no trajectory waits for a truncation value
    run_training(small_cfg(tmp_path, serial_mode=True, minibatch_unit="transitions", use_rnn=False,
                           normalize_input=True, learning_rate=3e-3, ppo_epochs=4, batch_size=16,
                           num_batches_per_iteration=4, max_policy_lag=1000, train_for_env_steps=1500))
    assert len(seen) >= 10 and all(valid == 64 for _, valid, _ in seen)
    assert seen[-1][2] > 0  # the statistics moved between iterations
    assert max(diff for diff, _, _ in seen) < 1e-5, seen


def test_a_trajectory_whose_last_step_a_time_limit_cut_waits_for_its_truncation_value(tmp_path, monkeypatch):
    """The one trajectory a rollout worker holds back: the answer to the next observation writes V(final obs) into its
    last step. Episodes of exactly --rollout steps end every trajectory that way; each batch's truncation values must
    be the final observations' values under the weights that acted (serial mode: the learner's at the iteration's
    start), not what an earlier use of the slot left there."""
    import sfx.agents.appo.learning as appo

    from sfx.agents.appo import APPOActingRule

    monkeypatch.setattr(APPOActingRule, "stores_final_obs", True)  # the slots keep V's input for the check
    seen = []
    targets = appo.iteration_targets

    def checking(model, data, valids, cfg):
        truncated = data["truncated"]
        final = {k: v[truncated] for k, v in data["final_obs"].items()}
        with torch.no_grad():
            values = model.forward_step(final, torch.zeros(int(truncated.sum()), 1))["values"]
        seen.append((int(truncated.sum()), float((values - data["trunc_values"][truncated]).abs().max())))
        return targets(model, data, valids, cfg)

    monkeypatch.setattr(appo, "iteration_targets", checking)
    run_training(small_cfg(tmp_path, env="mujoco_halfcheetah", mujoco_max_episode_steps=16, rollout=16, recurrence=16,
                           serial_mode=True, minibatch_unit="transitions", use_rnn=False, learning_rate=3e-3,
                           batch_size=16, num_batches_per_iteration=4, max_policy_lag=1000, train_for_env_steps=1200))
    assert len(seen) >= 10 and all(n == 4 for n, _ in seen)  # every trajectory of every batch ends truncated
    assert max(diff for _, diff in seen) < 1e-5, seen


def test_async_run_stops_cleanly_without_leaks(tmp_path):
    before = shm_segments()
    cfg = small_cfg(tmp_path, serial_mode=False, train_for_env_steps=4000)
    result = run_training(cfg)
    assert result["status"] == "done"
    assert result["env_steps"] >= 4000
    assert result["samples_per_sec"] > 0
    assert not worker_processes()
    assert shm_segments() - before == set()
    assert list((tmp_path / "t" / "checkpoint_p0").glob("checkpoint_*.pth"))


def test_previous_action_and_reward_travel_with_each_observation(tmp_path, monkeypatch):
    """--use_prev_action_reward: beside observation t+1 the rollout worker writes action t (choice + 1) and
    reward t; zeros where an episode starts. Checked on every batch a (serial) learner gathers."""
    from sfx.engine.sample_source import FreshTrajectories
    from sfx.models.obs import PREV_ACTION_KEY, PREV_REWARD_KEY

    checked = {"steps": 0, "starts": 0}
    gather = FreshTrajectories.next_batch

    def checking_gather(self, version):
        full = gather(self, version)
        batch = full.data
        prev_a, prev_r = batch["obs"][PREV_ACTION_KEY], batch["obs"][PREV_REWARD_KEY][..., 0]
        done = batch["terminated"] | batch["truncated"]
        T = done.shape[1]
        start = done  # obs t+1 starts an episode when step t ended one
        assert torch.equal(prev_a[:, 1:][~start], batch["actions"][~start] + 1)
        assert torch.equal(prev_r[:, 1:][~start], batch["rewards"][~start])
        assert not prev_a[:, 1:][start].any() and not prev_r[:, 1:][start].any()
        checked["steps"] += int((~start).sum())
        checked["starts"] += int(start.sum())
        assert prev_a.shape[1] == T + 1
        return full

    monkeypatch.setattr(FreshTrajectories, "next_batch", checking_gather)
    run_training(small_cfg(tmp_path, serial_mode=True, use_prev_action_reward=True, train_for_env_steps=3000))
    assert checked["steps"] > 1000 and checked["starts"] > 10


def _in_process_components(tmp_path, **overrides):
    cfg = small_cfg(tmp_path, **overrides)
    info = probe_env(cfg)
    model = create_actor_critic(cfg, info.observation_space, info.action_space)
    w = wire(cfg, info, model, serial=cfg.serial_mode)
    return cfg, w


def test_stale_and_inactive_samples_are_not_trained_on(tmp_path):
    cfg, w = _in_process_components(tmp_path, serial_mode=True, max_policy_lag=5, num_workers=1)
    learner = build_component(w, "learner", 0, 0, torch.device("cpu"))
    learner.start()
    drain(w.report_queue)
    n = cfg.batch_size // cfg.rollout
    slots = [int(w.free_slots[0].get()) for _ in range(n)]
    tb = w.traj[0]
    tb.obs["obs"][slots] = torch.randn_like(tb.obs["obs"][slots])
    tb.policy_versions[slots[: n // 2]] = 0
    tb.policy_versions[slots[n // 2:]] = -100  # far behind the learner
    tb.active[slots] = True
    tb.active[slots[0], :4] = False  # the env said this agent sat these steps out
    learner.process([("traj", slots)])
    reports = [r for r in drain(w.report_queue) if r[0] == "train"]
    assert len(reports) == 1
    stats = reports[0][2]
    assert stats["valid_fraction"] == pytest.approx(0.5 - 4 / (n * cfg.rollout))
    assert stats["inactive_fraction"] == pytest.approx(4 / (n * cfg.rollout))
    assert stats["policy_lag_max"] == pytest.approx(100)
    assert np.isfinite(stats["loss/total"])
    assert w.free_slots[0].qsize() == tb.num_slots  # slots released right after the copy


def test_rollout_workers_block_when_the_learner_falls_behind(tmp_path):
    """Nobody trains: the workers must stop at the slot pool's size instead of growing memory (without the
    collection gate, which would hold them one batch ahead first)."""
    cfg, w = _in_process_components(tmp_path, serial_mode=False, num_workers=1, batches_ahead=0)
    policy = build_component(w, "policy_worker", 0, 0, torch.device("cpu"))
    w.weights[0].publish(policy.model, 0)
    worker = build_component(w, "rollout_worker", 0, -1, torch.device("cpu"))
    worker.should_stop = lambda: True  # called only while blocked on the free-slot queue
    worker.start()
    for _ in range(10_000):
        policy.process(drain(w.policy_queues[0]))
        worker.process(drain(w.rollout_inboxes[0]))
        if worker.stopped:
            break
    assert worker.stopped, "the worker never ran out of slots"
    assert w.free_slots[0].qsize() == 0
    queued = sum(len(m[1]) for m in drain(w.learner_queues[0]))
    total_slots = w.traj[0].num_slots
    agents = cfg.num_envs_per_worker
    assert queued + agents * 2 >= total_slots - agents  # everything else waits for the learner
    worker.close()


def _wait_for_training(log_file: Path, timeout_sec: float = 90) -> None:
    """Until a status line shows trained env steps (so there is something to checkpoint)."""
    deadline = time.time() + timeout_sec
    while time.time() < deadline:
        text = log_file.read_text() if log_file.exists() else ""
        if any(f"env steps {d}" in text for d in "123456789"):
            return
        time.sleep(0.5)
    raise AssertionError(f"no training progress in {log_file} after {timeout_sec} s")


def _train_cmd(tmp_path, steps, extra=()):
    return [sys.executable, "-m", "sfx.train", "--env=gym_CartPole-v1", "--experiment=resume",
            f"--train_dir={tmp_path}", "--num_workers=2", "--num_envs_per_worker=2", "--rollout=16",
            "--recurrence=8", "--batch_size=64", "--hidden_size=32", "--device=cpu",
            f"--train_for_env_steps={steps}", "--report_every_sec=0.5", *extra]


@pytest.mark.parametrize("how", ["ctrl_c", "sigterm"])
def test_stop_signal_saves_a_checkpoint_and_the_same_command_resumes(tmp_path, how):
    """Ctrl+C in a terminal signals the whole process group; a scheduler's SIGTERM may reach
    only the coordinator. Both must end in a checkpoint that the same command resumes."""
    before = shm_segments()
    proc = subprocess.Popen(_train_cmd(tmp_path, 10**9), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    log_file = tmp_path / "resume" / "sf_log.txt"
    _wait_for_training(log_file)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert children, "the training started no worker processes"
    if how == "ctrl_c":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, signal.SIGTERM)
    t0 = time.time()
    out, _ = proc.communicate(timeout=30)
    assert time.time() - t0 < 15, "stopping took too long"
    assert proc.returncode == 130, out
    # the forkserver and resource tracker leave when they see the coordinator gone: allow them a moment
    _, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, f"processes left behind: {alive}"
    assert shm_segments() - before == set()
    status = json.loads((tmp_path / "resume" / "status.json").read_text())
    assert (status["status"], status["stop_reason"]) == ("interrupted", "signal")
    ckpts = sorted((tmp_path / "resume" / "checkpoint_p0").glob("checkpoint_*.pth"))
    assert ckpts
    first = torch.load(ckpts[-1], weights_only=False)
    assert first["env_steps"] > 0
    assert not (tmp_path / "resume" / "done").exists()

    target = first["env_steps"] + 2000
    done = subprocess.run(_train_cmd(tmp_path, target), cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    log_text = log_file.read_text()
    assert f"resumed at train step {first['train_step']}, {first['env_steps']} env steps" in log_text
    ckpts = sorted((tmp_path / "resume" / "checkpoint_p0").glob("checkpoint_*.pth"))
    last = torch.load(ckpts[-1], weights_only=False)
    assert last["env_steps"] >= target
    assert last["train_step"] > first["train_step"]
    assert (tmp_path / "resume" / "done").exists()


def test_several_policies_and_policy_workers_route_per_policy(tmp_path):
    cfg = small_cfg(tmp_path, num_policies=2, policy_workers_per_policy=2, num_envs_per_worker=4,
                    train_for_env_steps=6000)
    result = run_training(cfg)
    assert result["status"] == "done"
    assert all(steps > 0 for steps in result["train_step"])
    for p in range(2):
        ckpt = torch.load(next((tmp_path / "t" / f"checkpoint_p{p}").glob("*.pth")), weights_only=False)
        assert ckpt["env_steps"] > 0
    assert not worker_processes()


def test_killed_coordinator_leaves_no_orphans(tmp_path):
    proc = subprocess.Popen(_train_cmd(tmp_path, 10**9), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    _wait_for_training(tmp_path / "resume" / "sf_log.txt")
    everyone = psutil.Process(proc.pid).children(recursive=True)
    assert len(everyone) >= 4
    proc.kill()  # SIGKILL: no handler runs in the coordinator
    proc.wait(timeout=10)
    gone, alive = psutil.wait_procs(everyone, timeout=15)
    assert not alive, f"orphans left: {alive}"
    # the learner noticed and saved what it had learned on its way out
    ckpt = max((tmp_path / "resume" / "checkpoint_p0").glob("checkpoint_*.pth"))
    assert torch.load(ckpt, weights_only=False)["env_steps"] > 0


def test_a_rollout_worker_records_the_slots_it_holds_and_a_restart_gives_them_back(tmp_path):
    """The slots a worker takes are marked in the shared owners table (a worker built without it, as
    build_component once did, left nothing for a restart to give back: every kill leaked its slots
    until the learner starved), and a restarted worker asks under a new request generation."""
    cfg, w = _in_process_components(tmp_path, num_workers=2, num_envs_per_worker=4)
    total = w.free_slots[0].qsize()
    worker = build_component(w, "rollout_worker", 1, -1, torch.device("cpu"), incarnation=3)
    assert worker.gen == 3 * 1_000_000
    worker.should_stop = lambda: False
    worker.start()  # resets its envs: each of its 4 agents takes a slot and asks for actions
    held = [int(x) for x in (w.slot_owners[0] == 1).nonzero().flatten()]
    assert len(held) == 4 and w.free_slots[0].qsize() == total - 4
    assert int((w.slot_owners[0] >= 0).sum()) == 4  # nobody else's
    worker.close()  # ... and the worker dies: the coordinator gives back what the table says it held
    assert give_back_slots(w, 1) == 4
    assert w.free_slots[0].qsize() == total and int((w.slot_owners[0] >= 0).sum()) == 0
    assert sorted(int(x) for x in drain(w.free_slots[0])) == list(range(total))  # each slot once
    assert give_back_slots(w, 1) == 0  # nothing is given back twice
