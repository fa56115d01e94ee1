"""A training shorter than --report_every_sec (a budget reached early, or a run a fault ends soon after its
start) still reports where its time went: every component's last, partial window reaches the end-of-run table
and TensorBoard's perf/ scalars, and status.json's closing FPS is the closing line's (the session's), not the
last minute's rate."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _scalar_tags(exp: Path) -> set[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = set()
    for events in (exp / ".summary" / "0").glob("events.*"):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        tags |= set(acc.Tags()["scalars"])
    return tags


@pytest.mark.fault("a training shorter than --report_every_sec (its perf/ scalars, timing table, status FPS)")
@pytest.mark.parametrize("inference", ["workers", "learner"])
def test_a_run_shorter_than_the_report_period_reports_its_time_and_fps(tmp_path, inference):
    cmd = [sys.executable, "-m", "sfx.train", "--env=gym_CartPole-v1", f"--train_dir={tmp_path}", "--experiment=s",
           "--num_workers=2", "--num_envs_per_worker=4", "--use_rnn=False", "--hidden_size=64", "--batch_size=256",
           "--train_for_env_steps=6000", "--report_every_sec=600", "--device=cpu", "--seed=1",
           "--set_workers_cpu_affinity=False", f"--inference={inference}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    err = proc.stderr
    table = err.split("where the time went", 1)[1]
    # every role, with all its components, in the table
    assert "rollout_worker: 2 components" in table, table
    assert "learner: 1 component" in table, table
    acting = "policy_worker: 1 component" if inference == "workers" else "inference: 1 component"
    assert acting in table, table
    # the rollout workers' share is measured over their whole life, not a first instant of waiting
    shares = re.findall(r"rollout_worker: 2 components, ([\d.,]+) s of their time", table)
    assert shares and float(shares[0].replace(",", "")) > 0.5, table
    tags = _scalar_tags(tmp_path / "s")
    for role in ("rollout_worker", "learner", "policy_worker" if inference == "workers" else "inference"):
        assert f"perf/{role}/busy" in tags, sorted(t for t in tags if t.startswith("perf/"))
    closing = re.search(r"training done after .*?: [\d,]+ env steps, \d+ samples/s \((\d+) FPS\)", err)
    status = json.loads((tmp_path / "s" / "status.json").read_text())
    assert closing and round(status["fps"]) == int(closing.group(1)), (status["fps"], closing and closing.group(0))
