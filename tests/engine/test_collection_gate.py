"""--batches_ahead: the collection gate keeps the rollout workers at most that many learner batches ahead
of the learners (sfx.engine.buffers.CollectionGate), so a learner that sets the pace trains on data its
previous step's weights collected (policy lag ~1) instead of data that waited behind every full slot."""

import pytest
import torch

from sfx.registries import default_cfg
from sfx.engine.buffers import CollectionGate
from sfx.engine.coordinator import build_component, give_back_slots, run_training
from sfx.engine.protocol import TRAJ
from sfx.engine.queues import drain
from tests.engine.test_training import _in_process_components, small_cfg, worker_processes


def test_every_agent_keeps_a_trajectory_in_progress_beyond_the_batches_ahead():
    # 256 agents, batches of 128 trajectories (an H100 line: 16 workers x 16 envs, batch 4096, rollout 32):
    # a bound of one batch let only half the agents step
    gate = CollectionGate(num_policies=1, num_workers=16, batches_ahead=1, num_agents=256)
    gate.set_per_iteration(0, 128)
    for w in range(16):
        assert gate.may_start()
        gate.count(w, 16)  # every agent starts a trajectory: 256 out
    assert gate.read_out() == (256, 384) and gate.may_start()
    gate.count(0, 128)  # a batch's worth finished and started again while the learner has not taken yet
    assert not gate.may_start()
    gate.took(0, 128, 128)
    assert gate.may_start()


def test_the_gate_counts_starts_against_every_learners_takes_and_the_lost():
    gate = CollectionGate(num_policies=2, num_workers=3, batches_ahead=2)
    assert not gate.may_start()  # no learner said its batch yet: nothing may start
    gate.set_per_iteration(0, 4)
    gate.set_per_iteration(1, 6)
    assert gate.may_start()  # 0 out of 2 x (4 + 6)
    gate.count(0, 12)
    gate.count(2, 7)
    assert gate.may_start()  # 19 < 20: one more split may start, and overshoot
    gate.count(1, 3)
    assert not gate.may_start()  # 22 out
    gate.took(1, 6, 6)
    assert gate.may_start()  # 16 out
    gate.count(1, 4)
    assert not gate.may_start()  # 20 out
    gate.lose(1)  # a dead worker held one started trajectory: it will never be taken
    assert gate.may_start()
    gate.took(0, 4, 8)  # PBT grew policy 0's batch: 2 x (8 + 6) may be out
    gate.count(0, 12)
    assert gate.may_start() and gate.read_out() == (27, 28)
    with pytest.raises(ValueError, match="batches_ahead must be >= 1 for a gate"):
        CollectionGate(1, 1, 0)


def _drive(policy, worker, w, rounds=3000):
    """Policy worker and rollout worker in turn; the trajectories sent to the learner, in order."""
    sent = []
    for _ in range(rounds):
        policy.process(drain(w.policy_queues[0]))
        worker.process(drain(w.rollout_inboxes[0]))
        worker.tick()
        sent += [s for kind, slots in drain(w.learner_queues[0]) if kind == TRAJ for s in slots]
    return sent


def test_workers_stop_one_batch_ahead_and_wait_for_the_learner_that_sets_the_pace(tmp_path):
    """One worker, 4 agents in 2 splits, batches of 4 trajectories. Before any iteration every agent keeps a
    trajectory in progress while one batch waits for the learner: the worker sends two batches and holds both
    splits (without the gate it fills every slot, 3 batches' worth). The learner takes and trains the first and
    finds the second already finished: it sets the pace, so the worker waits for it to take the second before
    starting more (not collecting a third with the weights the second was collected with). Once the learner
    has taken the second and finds nothing finished after it, the looser bound is back: the worker collects the
    third and fourth, with the newest weights from their second step on (the first action was asked before the
    hold). Policy lag: 1 for the second batch, 2/32 for the third (its first step)."""
    cfg, w = _in_process_components(tmp_path, serial_mode=False, num_workers=1, num_envs_per_worker=4,
                                    batches_ahead=1)
    per_iteration = cfg.batch_size // cfg.rollout
    assert w.gate is not None and per_iteration == 4 and w.gate.num_agents == 4
    learner = build_component(w, "learner", 0, 0, torch.device("cpu"))
    learner.start()  # publishes version 0 and tells the gate its batch
    policy = build_component(w, "policy_worker", 0, 0, torch.device("cpu"))
    worker = build_component(w, "rollout_worker", 0, -1, torch.device("cpu"))
    worker.should_stop = lambda: False
    worker.start()
    sent = _drive(policy, worker, w)
    assert len(sent) == 2 * per_iteration and worker.held == {0, 1}
    assert int(w.gate.started.sum()) == 2 * per_iteration and w.gate.finished_waiting(0) == 2 * per_iteration
    assert worker.read_timeout_sec < 0.01  # it polls the gate, not the 0.1 s idle read
    first, second = sent[:per_iteration], sent[per_iteration:]
    # the learner takes the first, trains (version 1), and ends the iteration with the second finished
    drain(w.report_queue)
    learner.process([(TRAJ, first)])
    assert learner.train_step == 1 and int(w.gate.learners[0, 0]) == per_iteration
    assert int(w.gate.learners[0, 2]) == 1 and w.gate.read_out() == (per_iteration, per_iteration)
    assert _drive(policy, worker, w, rounds=300) == [] and worker.held == {0, 1}  # waits for the learner
    learner.process([(TRAJ, second)])
    lag = [r[2] for r in drain(w.report_queue) if r[0] == "train"][-1]
    assert lag["policy_lag_max"] == 1 and lag["policy_lag_avg"] == pytest.approx(1.0)
    # nothing finished after the second: the learner will wait for data, so no env is held for it
    assert int(w.gate.learners[0, 2]) == 0 and w.gate.read_out() == (0, 2 * per_iteration)
    more = _drive(policy, worker, w)
    assert len(more) == 2 * per_iteration and worker.held == {0, 1}
    third = more[:per_iteration]
    assert (w.traj[0].policy_versions[second] == 0).all()  # collected while the first waited
    versions = w.traj[0].policy_versions[third]
    assert (versions[:, 0] == 0).all() and (versions[:, 1:] == 2).all()
    learner.process([(TRAJ, third)])
    lag = [r[2] for r in drain(w.report_queue) if r[0] == "train"][-1]
    assert lag["policy_lag_max"] == 2 and lag["policy_lag_avg"] == pytest.approx(2 / cfg.rollout)
    worker.close()


def test_the_bound_tightens_while_every_learner_sets_the_pace():
    """Learners that find their next batch finished when they end an iteration set the pace: the workers may
    then have max(agents, batches ahead) out instead of agents + batches ahead (they would wait either way;
    this way before starting, so the next batch acts with fresher weights). One learner that would wait for
    data brings the looser bound back."""
    gate = CollectionGate(num_policies=2, num_workers=2, batches_ahead=1, num_agents=32)
    gate.set_per_iteration(0, 64)
    gate.set_per_iteration(1, 16)
    assert gate.read_out() == (0, 32 + 80)
    gate.count(0, 96)
    gate.count_sent(0, 0, 64)
    gate.count_sent(1, 0, 8)
    gate.count_sent(1, 1, 16)
    gate.took(0, 64, 64)
    assert gate.finished_waiting(0) == 8 and not gate.iteration_ended(0)  # it will wait for 56 more
    gate.took(1, 16, 16)
    gate.count_sent(0, 1, 16)
    assert gate.iteration_ended(1)  # its next 16 are finished
    assert gate.read_out() == (16, 112)  # policy 0 waits: every agent may step
    gate.count_sent(0, 0, 60)
    assert gate.iteration_ended(0)  # 68 finished: policy 0's next batch is whole
    assert gate.read_out() == (16, 80) and gate.may_start()  # max(32, 64 + 16)
    gate.count(1, 64)
    assert not gate.may_start()
    # agents outnumbering the batches: every agent still may have a trajectory out
    wide = CollectionGate(num_policies=1, num_workers=16, batches_ahead=1, num_agents=256)
    wide.set_per_iteration(0, 128)
    wide.count_sent(0, 0, 128)
    assert wide.iteration_ended(0) and wide.read_out() == (0, 256)


def test_without_the_gate_the_worker_runs_ahead_until_the_slots_run_out(tmp_path):
    cfg, w = _in_process_components(tmp_path, serial_mode=False, num_workers=1, num_envs_per_worker=4,
                                    batches_ahead=0)
    assert w.gate is None
    learner = build_component(w, "learner", 0, 0, torch.device("cpu"))
    learner.start()
    policy = build_component(w, "policy_worker", 0, 0, torch.device("cpu"))
    worker = build_component(w, "rollout_worker", 0, -1, torch.device("cpu"))
    blocked = []
    worker.should_stop = lambda: blocked.append(1) or True  # asked only while it waits for a free slot
    worker.start()
    sent = []
    while not worker.stopped:
        policy.process(drain(w.policy_queues[0]))
        worker.process(drain(w.rollout_inboxes[0]))
        sent += [s for kind, slots in drain(w.learner_queues[0]) if kind == TRAJ for s in slots]
    assert len(sent) >= 2 * (cfg.batch_size // cfg.rollout)  # two batches and more wait: lag >= 2
    worker.close()


def test_a_dead_workers_slots_count_as_lost_so_the_others_are_not_held_back(tmp_path):
    cfg, w = _in_process_components(tmp_path, serial_mode=False, num_workers=2, batches_ahead=1)
    worker = build_component(w, "rollout_worker", 1, -1, torch.device("cpu"))
    worker.should_stop = lambda: False
    worker.start()  # each of its agents takes a slot
    worker.close()
    assert give_back_slots(w, 1) == cfg.num_envs_per_worker
    assert int(w.gate.lost[0]) == cfg.num_envs_per_worker


def test_no_gate_in_serial_mode_or_without_learners(tmp_path):
    assert _in_process_components(tmp_path, serial_mode=True, batches_ahead=1)[1].gate is None


@pytest.mark.parametrize("num_policies", [1, 2])
def test_a_gated_run_in_worker_processes_trains_to_the_end(tmp_path, num_policies):
    """No stall: two workers of 2 splits x 2 envs, one or two policies. With two, an agent whose next episode
    is the other policy's starts a trajectory alone in the middle of its split's round: a split held for it
    would strand its neighbours' unfinished trajectories, and every learner could wait for good (a VizDoom
    duel with PBT stalled at 16k env steps so). Every learner trains and the run ends on its step budget."""
    result = run_training(small_cfg(tmp_path, batches_ahead=1, num_policies=num_policies, num_envs_per_worker=4,
                                    train_for_env_steps=6000, train_for_seconds=60))
    assert result["status"] == "done" and result["env_steps"] >= 6000, result
    assert all(steps > 0 for steps in result["train_step"])
    assert not worker_processes()


def test_auto_gates_appo_one_batch_ahead_for_every_estimator():
    """-1 (the default) is the agent's choice: APPO keeps one batch ahead with GAE (its targets take the samples
    as on-policy) and with V-trace (which corrects the gradient, not the core state stored at acting time);
    0 turns the gate off, N sets it; SAC and R2D2 set no gate (their replay ratio paces sampling)."""
    from sfx.agents import find_agent
    from sfx.engine.wiring import collection_gate

    appo = find_agent("APPO")
    assert collection_gate(small_cfg("/tmp"), appo).batches_ahead == 1
    assert collection_gate(small_cfg("/tmp", with_vtrace=False), appo).batches_ahead == 1
    assert collection_gate(small_cfg("/tmp", with_vtrace=False, batches_ahead=0), appo) is None
    assert collection_gate(small_cfg("/tmp", batches_ahead=2), appo).batches_ahead == 2
    assert collection_gate(default_cfg(env="mujoco_invertedpendulum", algo="SAC"), find_agent("SAC")) is None
    assert collection_gate(default_cfg(env="gym_CartPole-v1", algo="R2D2"), find_agent("R2D2")) is None
