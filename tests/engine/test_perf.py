"""Where the time goes (sfx.engine.perf): the runtime loop measures every component's waits and busy time by
message kind, the components mark their parts, and the coordinator turns the reports into TensorBoard's
``perf/`` scalars, a part of the status line and a table at the end of a run."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from sfx.engine import perf, run_training
from sfx.engine.perf import GpuMonitor, PerfMeter, PerfTable, component_role, latency_bin_upper_sec, percentile_sec
from tests.engine.test_training import small_cfg


def test_a_meter_sums_parts_counts_and_latencies_per_window():
    m = PerfMeter("rollout_worker_0", report_sec=0.0)
    m.add("wait/actions", 0.25)
    with m.section("env_step"):
        time.sleep(0.01)
    m.count("rows", 3)
    m.count("rows", 4)
    m.latency("act_round_trip", 0.002)
    m.inbox_depth(2)
    m.inbox_depth(4)
    assert m.due()
    p = m.take()
    assert p["sec"]["wait/actions"] == 0.25 and 0.009 < p["sec"]["env_step"] < 0.5
    assert p["counts"] == {"rows": 7} and p["inbox_depth"] == 3.0 and int(p["hists"]["act_round_trip"].sum()) == 1
    assert p["wall"] >= p["sec"]["env_step"]
    empty = m.take()  # a new window
    assert empty["sec"] == {} and empty["counts"] == {} and int(empty["hists"]["act_round_trip"].sum()) == 0


def test_percentiles_of_the_log_binned_histogram_are_within_one_bin():
    m = PerfMeter("x")
    for _ in range(90):
        m.latency("rt", 0.001)
    for _ in range(10):
        m.latency("rt", 0.010)
    h = m.take()["hists"]["rt"]
    width = latency_bin_upper_sec(1) / latency_bin_upper_sec(0) * (1 + 1e-9)  # 10 ** 0.1: one bin
    assert 0.001 <= percentile_sec(h, 0.5) <= 0.001 * width
    assert 0.010 <= percentile_sec(h, 0.99) <= 0.010 * width
    assert np.isnan(percentile_sec(np.zeros_like(h), 0.5))


def test_outside_a_runtime_loop_sections_record_nothing():
    perf.use(None)
    with perf.section("forward"):
        pass
    perf.count("rows", 5)
    assert perf.current().take()["sec"] == {}


def _payload(wall, sec, counts=None):
    return {"wall": wall, "sec": sec, "counts": counts or {}, "hists": {}, "inbox_depth": 1.0}


def test_the_table_adds_a_roles_components_and_shows_shares_of_their_time():
    t = PerfTable()
    t.add("rollout_worker_0", _payload(10.0, {"wait/actions": 4.0, "busy/act": 6.0, "env_step": 5.0}))
    t.add("rollout_worker_1", _payload(10.0, {"wait/actions": 2.0, "busy/act": 8.0, "env_step": 7.0}))
    t.add("policy_worker_0", _payload(10.0, {"wait/requests": 7.0, "busy/req": 3.0, "forward": 2.0},
                                      {"rows": 500, "forwards": 10}))
    t.roll()
    s = t.scalars()
    assert s["perf/rollout_worker/wait/actions"] == pytest.approx(0.3)
    assert s["perf/rollout_worker/busy"] == pytest.approx(0.7) and s["perf/rollout_worker/env_step"] == pytest.approx(0.6)
    assert s["perf/policy_worker/rows_per_sec"] == pytest.approx(50.0)
    assert t.status_text() == "busy rollout 70% (env_step 60%), inference 30% (forward 20%)"
    table = t.table()
    assert "rollout_worker: 2 components, 20 s" in table and "of which env_step" in table
    assert t.summary()["policy_worker"]["busy"] == pytest.approx(0.3)
    assert component_role("learner_12") == "learner" and component_role("coordinator") == "coordinator"


@pytest.mark.skipif(torch.cuda.is_available(), reason="NVML is there with CUDA")
def test_without_nvml_the_gpu_monitor_says_so_once_and_the_run_goes_on(caplog):
    with caplog.at_level(logging.INFO, logger="sfx.engine.perf"):
        assert GpuMonitor.create(0) is None
    assert "NVML is not available" in caplog.text


def _summary_scalars(path):
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
    acc.Reload()
    return set(acc.Tags()["scalars"])


@pytest.mark.parametrize("serial", [False, True])
def test_a_run_reports_where_each_components_time_goes(tmp_path, serial):
    cfg = small_cfg(tmp_path, serial_mode=serial, train_for_env_steps=12_000, report_every_sec=0.5,
                    experiment_summaries_interval=0.5)
    result = run_training(cfg)
    assert result["status"] == "done"
    roles = result["perf"]
    assert set(roles) == {"rollout_worker", "policy_worker", "learner"}
    for role, shares in roles.items():
        loop = sum(v for k, v in shares.items() if k.startswith(("wait/", "busy/")))
        if not serial:  # in its own process the loop's parts are the component's whole time
            assert 0.8 < loop <= 1.01, (role, shares)
        assert shares["busy"] > 0
    assert roles["rollout_worker"]["env_step"] > 0 and roles["policy_worker"]["forward"] > 0
    assert roles["learner"]["step"] > 0 and roles["learner"]["busy/traj"] >= roles["learner"]["step"]
    if not serial:
        assert roles["rollout_worker"]["wait/actions"] > 0 and roles["learner"]["wait/trajectories"] > 0
    log_text = (tmp_path / "t" / "sf_log.txt").read_text()
    assert "where the time went" in log_text and "of which forward" in log_text
    assert "| busy rollout" in log_text  # the status line's part
    tags = _summary_scalars(tmp_path / "t" / ".summary" / "0")
    assert {"perf/rollout_worker/busy", "perf/policy_worker/forward", "perf/learner/step"} <= tags
    assert "perf/rollout_worker/act_round_trip_p50_ms" in tags or serial
