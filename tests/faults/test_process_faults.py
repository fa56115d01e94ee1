"""Processes killed, frozen or stopped during real training runs (CartPole, asynchronous mode, each
run its own ``python -m sfx.train``): workers are restarted, a dead learner stops the run cleanly,
a killed coordinator leaves no orphans, and every time the same command resumes from the last
checkpoint with env steps neither lost beyond it nor counted twice. Each run is shared by the rows
that inspect it; all of them check that no process and no shared-memory segment is left behind."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from sfx.experiment import list_checkpoints, load_checkpoint

REPO = Path(__file__).resolve().parents[2]
# each row is a few real trainings: more than the default per-test limit on a loaded 2-core machine
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def shm_segments():
    """Named shared-memory objects that could be a training's: other programs on a shared machine
    (VizDoom engines, other torch programs' ``torch_<pid>_*`` files, semaphores) are left out."""
    if not os.path.isdir("/dev/shm"):
        return set()
    return {n for n in os.listdir("/dev/shm")
            if not n.startswith(("ViZDoom", "sem.mp-")) and not (n.startswith("torch_") and not _ours(n))}


_OUR_PIDS: set[int] = set()


def _ours(name: str) -> bool:
    parts = name.split("_")
    return len(parts) > 1 and parts[1].isdigit() and int(parts[1]) in _OUR_PIDS


class Run:
    """One ``sfx.train`` process and what it has shown of itself."""

    def __init__(self, train_dir: Path, steps: int, *extra: str) -> None:
        self.train_dir, self.steps, self.extra = train_dir, steps, extra
        self.exp = train_dir / "f"
        self.pids: set[int] = set()
        self.proc: subprocess.Popen | None = None

    def cmd(self) -> list[str]:
        return [sys.executable, "-m", "sfx.train", "--env=gym_CartPole-v1", f"--train_dir={self.train_dir}",
                "--experiment=f", "--num_workers=2", "--num_envs_per_worker=4", "--use_rnn=False", "--hidden_size=64",
                "--batch_size=256", f"--train_for_env_steps={self.steps}", "--report_every_sec=0.5",
                "--save_every_sec=2", "--heartbeat_timeout_sec=6", "--set_workers_cpu_affinity=False", "--seed=1",
                *self.extra]

    def start(self) -> "Run":
        self.proc = subprocess.Popen(self.cmd(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.pids.add(self.proc.pid)
        _OUR_PIDS.add(self.proc.pid)
        return self

    def status(self) -> dict:
        try:
            doc = json.loads((self.exp / "status.json").read_text())
        except (OSError, ValueError):
            return {}
        self.pids.update(doc.get("components", {}).values())
        _OUR_PIDS.update(self.pids)
        return doc

    def wait_for(self, what: str, condition, timeout_sec: float = 90.0):
        deadline = time.time() + timeout_sec
        while time.time() < deadline:
            value = condition()
            if value:
                return value
            assert self.proc is None or self.proc.poll() is None or what == "exit", f"the run ended waiting for {what}"
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}; log tail:\n{self.log()[-3000:]}")

    def steps_at_least(self, n: int) -> int:
        return self.wait_for(f"{n} env steps", lambda: self.status().get("env_steps", 0) >= n and
                             self.status()["env_steps"])

    def pid_of(self, name: str) -> int:
        return self.wait_for(f"pid of {name}", lambda: self.status().get("components", {}).get(name))

    def log(self) -> str:
        path = self.exp / "sf_log.txt"
        return path.read_text() if path.exists() else ""

    def finish(self, timeout_sec: float = 180.0) -> tuple[int, str]:
        _, err = self.proc.communicate(timeout=timeout_sec)
        return self.proc.returncode, err

    def assert_nothing_left(self) -> None:
        deadline = time.time() + 15
        alive = []
        while time.time() < deadline:
            alive = [p for p in self.pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
            if not alive:
                break
            time.sleep(0.2)
        assert not alive, f"processes left behind: {alive}"


LOCKED_QUEUE = "is probably left locked"
COORDINATOR_ROW_STEPS = 150_000


def worker_fault(train_dir: Path, component: str, sig: int, expected: str, steps: int = 30_000, *extra: str) -> dict:
    """Run (with ``extra`` flags), inject ``sig`` into ``component``, let it finish. The component is
    restarted and the run finishes; or (when the process died holding a queue's lock) the run stops with
    a checkpoint and the same command resumes and finishes. Either way nothing is left behind."""
    shm_before = shm_segments()
    run = Run(train_dir, steps, *extra).start()
    run.steps_at_least(5_000)
    victim = run.pid_of(component)
    os.kill(victim, sig)
    outcome = run.wait_for("restart or stop", lambda: ("restarted" if f"{component} {expected}: restarted it"
                                                       in run.log() else None) or
                           ("stopped" if LOCKED_QUEUE in run.log() else None), 60)
    restarted_pid = run.pid_of(component) if outcome == "restarted" else None
    rc, err = run.finish()
    run.assert_nothing_left()
    result = {"run": run, "victim": victim, "outcome": outcome, "new_pid": restarted_pid, "rc": rc, "err": err,
              "log": run.log()}
    if rc != 0:
        assert LOCKED_QUEUE in err, err[-3000:]
        checkpoint_steps = load_checkpoint(list_checkpoints(run.exp / "checkpoint_p0")[0])["env_steps"]
        again = Run(train_dir, steps, *extra).start()
        rc, err = again.finish()
        again.assert_nothing_left()
        assert f"{checkpoint_steps} env steps" in err  # resumed from the last checkpoint
        result.update(run=again, rc=rc, err=err)
    assert shm_segments() <= shm_before
    return result


def check_finished(run: Run, rc: int, err: str) -> None:
    assert rc == 0, err[-3000:]
    assert (run.exp / "done").is_file()
    steps = int((run.exp / "done").read_text().split("=")[1])
    # the trajectories in flight when the target is reached still count (a few batches of 256, more when
    # a loaded machine slows the coordinator's notice: 14.5 batches seen at load 5-8); nothing is counted
    # twice, which would be far above
    assert run.steps <= steps <= run.steps + 24 * 256


@pytest.mark.fault("kill -9 of a rollout worker")
def test_killed_rollout_worker_is_restarted(tmp_path):
    r = worker_fault(tmp_path, "rollout_worker_0", signal.SIGKILL, "died (exit code -9)")
    print(f"outcome: {r['outcome']}")
    if r["outcome"] == "restarted":
        assert r["new_pid"] != r["victim"]
    check_finished(r["run"], r["rc"], r["err"])


@pytest.mark.fault("SIGSTOP of a rollout worker (hang, heartbeat timeout)")
def test_frozen_rollout_worker_is_detected_and_restarted(tmp_path):
    # the other worker alone must not finish the run before the 6 s heartbeat timeout: CartPole
    # trains at 3-7k samples/s here
    r = worker_fault(tmp_path, "rollout_worker_1", signal.SIGSTOP, "hung for more than 6 s", steps=100_000)
    print(f"outcome: {r['outcome']}")
    assert "rollout_worker_1 sent no heartbeat for more than 6 s" in r["log"]
    check_finished(r["run"], r["rc"], r["err"])


@pytest.mark.fault("kill -9 of the policy worker")
def test_killed_policy_worker_is_restarted_and_requests_are_resent(tmp_path):
    r = worker_fault(tmp_path, "policy_worker_0", signal.SIGKILL, "died (exit code -9)")
    print(f"outcome: {r['outcome']}")
    check_finished(r["run"], r["rc"], r["err"])


# a Transformer-XL run whose weights do not move (lr 1e-12): every minibatch's recomputation must equal what
# acting saw (ratio 1, KL 0), which holds only if each agent's memory and the slots' copies of it are right
TRXL_FROZEN = ("--use_rnn=True", "--rnn_type=trxl", "--mem_len=8", "--n_layer=1", "--n_heads=2", "--d_head=8",
               "--d_inner=32", "--learning_rate=1e-12", "--normalize_input=False", "--rollout=16", "--recurrence=16",
               "--experiment_summaries_interval=0.5")


def _ratios_and_kls(exp: Path) -> tuple[list[float], list[float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ratios, kls = [], []
    for events in sorted((exp / ".summary" / "0").glob("events.*")):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        ratios += [e.value for e in acc.Scalars("ratio_mean")]
        kls += [e.value for e in acc.Scalars("kl")]
    return ratios, kls


@pytest.mark.fault("kill -9 of a worker of a Transformer-XL run (its memory bookkeeping after the restart)")
@pytest.mark.parametrize("component", ["policy_worker_0", pytest.param("rollout_worker_0", marks=pytest.mark.extended)])
def test_transformer_xl_memory_survives_a_worker_restart(tmp_path, component):
    """The restarted policy worker answers the resent requests again (each entry lands on the same memory
    row); the restarted rollout worker starts new episodes (the memory is masked). Either way the learner
    still sees exactly what acting saw, before and after the kill."""
    r = worker_fault(tmp_path, component, signal.SIGKILL, "died (exit code -9)", 40_000, *TRXL_FROZEN)
    print(f"outcome: {r['outcome']}")
    check_finished(r["run"], r["rc"], r["err"])
    ratios, kls = _ratios_and_kls(r["run"].exp)
    assert len(ratios) >= 5
    assert max(abs(x - 1.0) for x in ratios) < 1e-3 and max(abs(k) for k in kls) < 1e-4, (ratios, kls)


KILLS = 5


def _kill_workers_again_and_again(train_dir: Path) -> tuple[Run, list[int]] | None:
    """One run with KILLS kills; None if one left a shared queue locked (the run then stops with its
    checkpoint, as the locked-queue rows check)."""
    # long enough to outlast the kills at CartPole's ~7k steps/s here
    run = Run(train_dir, 400_000, "--traj_buffers_excess_ratio=1", "--heartbeat_timeout_sec=1.5",
              "--batches_ahead=1").start()
    assert "24 trajectory slots of 32 steps per policy" in run.wait_for(
        "the wiring", lambda: "trajectory slots of" in run.log() and run.log())
    run.steps_at_least(5_000)
    restarted = []
    for k in range(KILLS):
        name = f"rollout_worker_{k % 2}"
        assert run.proc.poll() is None, f"the run ended before kill {k + 1}: raise its step budget"
        os.kill(run.pid_of(name), signal.SIGKILL)
        line = run.wait_for(f"restart #{k // 2 + 1} of {name}", lambda: next(
            (ln for ln in run.log().splitlines() if f"{name} died (exit code -9): restarted it (restart "
             f"#{k // 2 + 1};" in ln), None) or (LOCKED_QUEUE in run.log() and "stopped"), 30)
        if line == "stopped":
            run.finish()
            run.assert_nothing_left()
            return None
        restarted.append(int(line.split("; ")[1].split(" trajectory slots")[0]))
        time.sleep(3 * 1.5 + 0.5)  # out of the restart's window
    return run, restarted


@pytest.mark.fault("kill -9 of rollout workers 5 times in one run (slots given back)")
def test_repeated_rollout_worker_kills_give_back_their_slots_and_the_run_finishes(tmp_path):
    """2 workers x 4 envs, batch 256 (8 trajectories per iteration), --traj_buffers_excess_ratio=1: 24 slots.
    A killed worker holds at least one slot per agent (4); 5 kills strand 20 or more unless each restart gives
    them back, and fewer than 8 in circulation starve the learner for good (every process alive, the run never
    ends). The collection gate is on (--batches_ahead=1: at most 8 trajectories out): each restart also counts the
    dead worker's held trajectories as lost, else 8 stranded ones would hold every worker back for good. Kills alternate between the workers, each after the previous restart's window (3 heartbeat timeouts
    of 1.5 s: a failure inside it stops the run as a probably locked queue). A kill that leaves a queue locked (a
    few percent) stops the run: then the scenario starts over in a new folder, three times at most."""
    shm_before = shm_segments()
    for attempt in range(3):
        outcome = _kill_workers_again_and_again(tmp_path / f"attempt{attempt}")
        if outcome is not None:
            break
    assert outcome is not None, "three runs in a row stopped on a locked queue"
    run, restarted = outcome
    print(f"slots given back per restart: {restarted}")
    if not (all(n >= 4 for n in restarted) and sum(restarted) > 24 - 8):
        run.proc.terminate()  # starved or about to: do not wait for it
        run.finish()
    assert all(n >= 4 for n in restarted), restarted  # at least one per agent of the dead worker
    assert sum(restarted) > 24 - 8  # without them the learner would have starved
    rc, err = run.finish()
    run.assert_nothing_left()
    check_finished(run, rc, err)
    assert shm_segments() <= shm_before


@pytest.fixture(scope="module")
def learner_fault(tmp_path_factory):
    """kill -9 of the learner (the run stops), then a truncated newest checkpoint; the same command resumes."""
    train_dir = tmp_path_factory.mktemp("learner")
    # long enough that two checkpoints (--save_every_sec=2) come well before the end at any speed
    steps = 100_000
    run = Run(train_dir, steps).start()
    run.steps_at_least(5_000)
    run.wait_for("two checkpoints", lambda: len(list_checkpoints(run.exp / "checkpoint_p0")) >= 2)
    os.kill(run.pid_of("learner_0"), signal.SIGKILL)
    rc, err = run.finish()
    run.assert_nothing_left()
    ckpts = list_checkpoints(run.exp / "checkpoint_p0")
    newest, previous = ckpts[0], ckpts[1]
    previous_steps = load_checkpoint(previous)["env_steps"]
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 3])  # a kill mid-copy, a bad disk
    again = Run(train_dir, steps).start()
    rc2, err2 = again.finish()
    again.assert_nothing_left()
    return run, rc, err, again, rc2, err2, previous_steps


@pytest.mark.fault("kill -9 of the learner")
def test_killed_learner_stops_the_run_cleanly_and_it_resumes(learner_fault):
    run, rc, err, again, rc2, err2, _ = learner_fault
    assert rc == 1
    assert "learner_0 died (exit code -9); its last checkpoint is kept and the same command resumes" in err
    check_finished(again, rc2, err2)


@pytest.mark.fault("truncated newest checkpoint")
def test_truncated_checkpoint_falls_back_to_the_previous_one(learner_fault):
    _, _, _, again, rc2, err2, previous_steps = learner_fault
    assert "resumed at train step" in err2 and f"{previous_steps} env steps" in err2
    assert "falling back" in err2.lower() or "could not be loaded" in err2.lower() or "corrupt" in err2.lower()
    check_finished(again, rc2, err2)


@pytest.fixture(scope="module")
def coordinator_faults(tmp_path_factory):
    """kill -9 of the coordinator (workers notice and exit), restart; SIGTERM (checkpoint, exit 130), restart."""
    shm_before = shm_segments()
    train_dir = tmp_path_factory.mktemp("coordinator")
    # budgets long enough that the run is still going when the faults land (CartPole trains at ~7k steps/s)
    run = Run(train_dir, COORDINATOR_ROW_STEPS).start()
    run.steps_at_least(5_000)
    run.wait_for("a checkpoint", lambda: list_checkpoints(run.exp / "checkpoint_p0"))
    run.proc.kill()
    run.proc.communicate()
    t0 = time.time()
    run.assert_nothing_left()
    orphan_sec = time.time() - t0
    checkpoint_steps = load_checkpoint(list_checkpoints(run.exp / "checkpoint_p0")[0])["env_steps"]

    second = Run(train_dir, COORDINATOR_ROW_STEPS).start()
    resumed_log = second.wait_for("resume", lambda: "resumed at train step" in second.log() and second.log())
    second.steps_at_least(checkpoint_steps + 5_000)
    second.proc.send_signal(signal.SIGTERM)
    rc_term, err_term = second.finish()
    second.assert_nothing_left()
    term_steps = load_checkpoint(list_checkpoints(run.exp / "checkpoint_p0")[0])["env_steps"]

    third = Run(train_dir, COORDINATOR_ROW_STEPS).start()
    rc3, err3 = third.finish()
    third.assert_nothing_left()
    return orphan_sec, checkpoint_steps, resumed_log, rc_term, err_term, term_steps, third, rc3, err3, shm_before


@pytest.mark.fault("kill -9 of the coordinator, then restart")
def test_killed_coordinator_leaves_no_orphans_and_resumes(coordinator_faults):
    orphan_sec, checkpoint_steps, resumed_log, *_ = coordinator_faults
    assert orphan_sec < 15
    assert f"{checkpoint_steps} env steps" in resumed_log.split("resumed at train step", 1)[1].splitlines()[0]


@pytest.mark.fault("SIGTERM (final checkpoint), then restart")
def test_sigterm_checkpoints_and_the_same_command_finishes(coordinator_faults):
    *_, rc_term, err_term, term_steps, third, rc3, err3, shm_before = coordinator_faults
    assert rc_term == 130 and "SIGTERM received: stopping, saving a final checkpoint" in err_term
    assert "resumed at train step" in err3 and f"{term_steps} env steps" in err3
    check_finished(third, rc3, err3)
    assert shm_segments() <= shm_before


@pytest.mark.fault("an env that hangs inside step()")
def test_hanging_env_gets_its_worker_restarted(tmp_path):
    marker = tmp_path / "hung"
    env = dict(os.environ, SFX_EXTRA_ENV_MODULES="hanging_env", HANG_MARKER=str(marker),
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    # long enough for the 6 s heartbeat timeout to fire while the other worker trains on (~7k steps/s)
    run = Run(tmp_path, 150_000, "--env=tst_hanging")
    run.proc = subprocess.Popen(run.cmd(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    run.pids.add(run.proc.pid)
    _OUR_PIDS.add(run.proc.pid)
    rc, err = run.finish()
    run.assert_nothing_left()
    if rc != 0:  # the hung worker held a queue: the run stopped with a checkpoint; the same command resumes
        assert LOCKED_QUEUE in err, err[-3000:]
        again = Run(tmp_path, 150_000, "--env=tst_hanging")
        again.proc = subprocess.Popen(again.cmd(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env)
        rc, err = again.finish()
        run = again
    assert marker.exists()  # an env did hang
    log_text = run.log()
    assert "sent no heartbeat for more than 6 s" in log_text and "in step" in log_text  # its stack, in the env
    check_finished(run, rc, err)


def _helper_of(run: Run, marker: str) -> psutil.Process:
    """The coordinator's multiprocessing helper whose command line has ``marker`` (``forkserver import main``,
    ``resource_tracker import main``)."""
    return run.wait_for(marker, lambda: next((c for c in psutil.Process(run.proc.pid).children()
                                              if marker in " ".join(c.cmdline())), None), 30)


@pytest.mark.extended  # in ./all_tests.sh only with SFX_EXTENDED=1 (pytest.ini says why)
@pytest.mark.fault("kill -9 of the forkserver and of the resource tracker")
def test_killed_forkserver_and_resource_tracker_leave_the_components_running(tmp_path):
    """Every component is a child of the forkserver, whose socket alone carried their exit status: once it was
    killed multiprocessing said each exited with code 255, and the learner's 'death' stopped the run. Now the
    components are still known alive by pid: none is restarted or declared dead, a new forkserver and resource
    tracker start (one line each), a rollout worker killed afterwards is restarted through the new forkserver,
    and the run finishes its budget with no process left (the orphaned components exit too)."""
    shm_before = shm_segments()
    run = Run(tmp_path, 150_000).start()  # long enough to outlast the faults at CartPole's ~7k steps/s
    run.steps_at_least(5_000)
    pids_before = dict(run.status()["components"])
    forkserver = _helper_of(run, "forkserver import main")
    tracker = _helper_of(run, "resource_tracker import main")
    run.pids.update({forkserver.pid, tracker.pid})
    forkserver.kill()
    tracker.kill()
    run.wait_for("the forkserver's line", lambda: f"the forkserver (pid {forkserver.pid}) died: started a new one"
                 in run.log(), 30)
    run.wait_for("the resource tracker's line", lambda: f"the resource tracker (pid {tracker.pid}) died" in run.log(), 30)
    steps = run.status()["env_steps"]
    run.steps_at_least(steps + 5_000)  # still training
    assert {n: p for n, p in run.status()["components"].items()} == pids_before
    new_forkserver = _helper_of(run, "forkserver import main")
    run.pids.add(new_forkserver.pid)
    assert new_forkserver.pid != forkserver.pid
    os.kill(pids_before["rollout_worker_0"], signal.SIGKILL)
    run.wait_for("the restart", lambda: "rollout_worker_0 died (exit code unknown: it ended after its forkserver): "
                                        "restarted it (restart #1;" in run.log(), 30)
    rc, err = run.finish()
    run.status()
    run.assert_nothing_left()
    assert "died (exit code 255)" not in err and "learner_0 died" not in err
    check_finished(run, rc, err)
    assert shm_segments() <= shm_before


@pytest.mark.fault("SIGSTOP of the forkserver, then a component to restart")
def test_a_stopped_forkserver_does_not_hang_a_restart(tmp_path):
    """Every process start goes through the forkserver: a stopped one used to hang the restart, and with it the
    coordinator's whole loop (no supervision, no line), for as long as it stayed stopped. Now it is killed and a
    new one starts the restarted component."""
    run = Run(tmp_path, 150_000).start()
    run.steps_at_least(5_000)
    forkserver = _helper_of(run, "forkserver import main")
    run.pids.add(forkserver.pid)
    forkserver.suspend()
    try:
        os.kill(run.pid_of("rollout_worker_1"), signal.SIGKILL)
        # the stopped forkserver cannot pass the death on: the missing heartbeat (6 s) tells it
        run.wait_for("the restart", lambda: "rollout_worker_1 hung for more than 6 s: restarted it (restart #1;"
                     in run.log(), 60)
        assert f"the forkserver (pid {forkserver.pid}) is stopped (SIGSTOP?): killed it" in run.log()
        steps = run.status()["env_steps"]
        run.steps_at_least(steps + 2_000)  # the supervision loop turns: the status goes on
    finally:
        if forkserver.is_running():
            forkserver.resume()
    rc, err = run.finish()
    run.status()
    run.assert_nothing_left()
    check_finished(run, rc, err)
