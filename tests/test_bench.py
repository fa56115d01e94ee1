"""bench/: the synthetic image env is what its docstring says, and the throughput script runs.

No timing is asserted anywhere: benchmarks give figures, not pass/fail.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bench import bench_throughput
from bench.image_env import EPISODE_STEPS, PREFIX, ScrollingTargetEnv, parse_size
from sfx.cfg import ConfigError
from sfx.registries import parse_args
from sfx.envs import make_env


def test_image_env_frames_rewards_and_time_limit():
    env = ScrollingTargetEnv(128, 72, render_mode="rgb_array")
    obs, _ = env.reset(seed=5)
    assert obs.shape == (3, 72, 128) and obs.dtype == np.uint8 and env.observation_space.contains(obs)
    assert env.render().shape == (72, 128, 3)
    total_matched, total_reward = 0, 0.0
    for t in range(1, EPISODE_STEPS + 1):
        target = env._target  # the quadrant on screen when the agent acts
        action = t % 4
        obs, reward, terminated, truncated, _ = env.step(action)
        total_matched += action == target
        total_reward += reward
        assert not terminated
        assert truncated == (t == EPISODE_STEPS)
    assert total_reward == total_matched > 0


def test_image_env_shows_the_target_quadrant():
    env = ScrollingTargetEnv(128, 72)
    env.reset(seed=0)
    for _ in range(50):
        obs, *_ = env.step(0)
        # the square is the only pure white: it must sit in the target's quadrant
        white = np.argwhere((obs == 255).all(axis=0))
        row, col = divmod(env._target, 2)
        assert white.size and (white[:, 0] >= row * 36).all() and (white[:, 0] < (row + 1) * 36).all()
        assert (white[:, 1] >= col * 64).all() and (white[:, 1] < (col + 1) * 64).all()


def test_image_env_family_is_registered_and_checks_its_name(tmp_path):
    cfg = parse_args([f"--env={PREFIX}96x64", f"--train_dir={tmp_path}", "--device=cpu"])
    env = make_env(cfg)
    assert env.num_agents == 1 and env.observation_space.shape == (3, 64, 96)
    env.close()
    assert parse_size(f"{PREFIX}128x72") == (128, 72)
    with pytest.raises(ConfigError, match=f"{PREFIX}WIDTHxHEIGHT"):
        parse_args([f"--env={PREFIX}big", f"--train_dir={tmp_path}"])


def test_table_relates_to_the_cartpole_baseline():
    rows = [{"name": "cartpole", "env": "gym_CartPole-v1", "workers": 2, "envs_per_worker": 16,
             "samples_per_sec": 1000.0, "status": "done"},
            {"name": "image", "env": "bench_image_128x72", "workers": 2, "envs_per_worker": 8,
             "samples_per_sec": 250.0, "status": "done"}]
    lines = bench_throughput.format_table(rows).splitlines()
    assert lines[0].split() == ["env", "workers", "envs/worker", "samples/s", "vs", "CartPole", "status"]
    assert lines[2].split()[3:5] == ["1,000", "1.00x"]
    assert lines[3].split()[3:5] == ["250", "0.25x"]


@pytest.mark.slow
def test_throughput_script_trains_the_image_env_in_worker_processes(capsys):
    # the family must reach the spawned rollout workers, or the run fails
    rc = bench_throughput.main(["--seconds=8", "--only=image", "--num_workers=1", "--image_envs_per_worker=2",
                                "--device=cpu", "--", "--batch_size=64", "--hidden_size=32"])
    out = capsys.readouterr().out
    assert rc == 0, out
    row = next(line for line in out.splitlines() if line.startswith("bench_image_128x72"))
    assert row.split()[-1] == "done" and float(row.split()[3].replace(",", "")) > 0


def test_throughput_reports_a_missing_sample_factory_venv_as_skipped(tmp_path):
    from bench import throughput

    args = throughput.parse_bench_args(["--tiny", f"--sf_python={tmp_path / 'nowhere' / 'bin' / 'python'}"])
    r = throughput.measure_sf_training(args, tmp_path)
    assert r["status"] == "skipped" and "setup_sample_factory.sh" in r["reason"]
    table = throughput.format_table([("raw limit: 2 processes", {"status": "done", "fps": 20000.0, "episode_len": 47.25}),
                                     ("Sample Factory 2.1.1 training", r)])
    assert table.splitlines()[0].split() == ["measurement", "FPS", "ep", "len", "lag", "status"]
    assert table.splitlines()[2].split()[-4:] == ["20,000", "47.2", "-", "done"]
    assert table.splitlines()[3].split()[4:8] == ["-", "-", "-", "skipped:"]
    grid = throughput.format_scaling({"1x4": 1000.0, "2x4": 1900.0}, [1, 2], [4, 8]).splitlines()
    assert grid[1].split() == ["1", "1,000", "-"] and grid[2].split() == ["2", "1,900", "-"]


@pytest.mark.extended  # in ./all_tests.sh only with SFX_EXTENDED=1 (pytest.ini says why)
@pytest.mark.slow  # each row's start-up (samplers, trainings, the overhead trio, the scaling grid): ~2-3 min on 2 cores
def test_throughput_script_tiny_mode_measures_every_kind_of_row(tmp_path, capsys):
    """One tiny run of every kind of row: raw envs (round-robin over several per process: the raw limit row is the
    same child with one), the dummy sampler (its episode-length twin; the sampler row is the same child), sfx's
    training, a named sfx row, the overhead trio, Sample Factory's where its venv is, and the scaling grid."""
    import json

    from bench import throughput

    only = ["raw_many", "raw_len", "sampler_len", "sfx", "rows", "overhead", "sf"]
    rc = throughput.main(["--tiny", "--scaling", "--episode_len=6", "--sfx_row", "ungated=--batches_ahead=0",
                          *(f"--only={key}" for key in only), f"--out_dir={tmp_path}"])
    out = capsys.readouterr().out
    assert rc == 0, out
    summary = json.loads((tmp_path / "throughput.json").read_text())
    results = summary["results"]
    for key in ("raw_many", "sfx", "raw_len", "sampler_len", "ungated", "overhead_sampler", "overhead_sfx"):
        assert results[key]["status"] == "done" and results[key]["fps"] > 0, out
    assert results["raw_len"]["episode_len"] <= 6 and results["sampler_len"]["episode_len"] <= 6
    assert results["ungated"]["command"][-1] == "--batches_ahead=0" and results["ungated"]["episode_len"] > 6
    assert summary["device"] == "cpu" and summary["sfx_rows"] == {"ungated": ["--batches_ahead=0"]}
    assert summary["ratios"]["overhead_sfx"] > 0 and summary["ratios"]["sampler_len_over_raw_len"] > 0
    assert "sfx training, ungated: --batches_ahead=0" in out and "pipeline overhead" in out
    sf = results["sf"]
    if throughput.SF_VENV.joinpath("bin", "python").exists():
        assert sf["status"] == "done" and sf["fps"] > 0, out
        assert results["overhead_sf"]["status"] == "done" and summary["ratios"]["overhead_sf"] > 0, out
    else:
        assert sf["status"] == "skipped" and "skipped" in out
    assert set(summary["scaling"]) == {"1x2", "1x4"} and all(v > 0 for v in summary["scaling"].values())
    assert (tmp_path / "throughput.png").stat().st_size > 1000
    assert (tmp_path / "throughput_scaling.png").stat().st_size > 1000


def test_learner_step_bench_times_every_variant(capsys):
    from bench import learner_step

    assert learner_step.main(["--steps=1", "--batch_size=64", "--rollout=16"]) == 0
    out = capsys.readouterr().out
    for label in ("float32, NCHW", "float32, channels_last", "bf16 encoder, channels_last"):
        assert label in out
    assert "speed-up per learner step" in out


def test_trxl_bench_measures_lstm_and_trxl_rows(capsys):
    from bench import trxl

    assert trxl.main(["--steps=1", "--acting_reps=1", "--batch_sizes=4", "--mem_lens=8", "--batch_size=64",
                      "--rollout=16", "--skip_e2e"]) == 0
    out = capsys.readouterr().out
    for title in ("Acting:", "Learning:", "Memory:"):
        assert title in out
    tables = [line.split() for line in out.splitlines() if line.startswith(("lstm 512", "trxl mem 8"))]
    assert len(tables) == 6, out  # one row of each core in each table
    memory_rows = tables[-2:]
    assert memory_rows[0][3] == "0" and int(memory_rows[1][4]) > 0, out  # shm MiB of the core's memory


def _write_scalars(folder, tag, points, extra_tag=None):
    """Event files as a framework's SummaryWriter leaves them: (step, wall_time, value) points."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    for step, wall, value in points:
        writer.add_scalar(tag, value, step, walltime=wall)
        if extra_tag:
            writer.add_scalar(extra_tag, 1000.0, step, walltime=wall)
    writer.close()


def test_learning_bench_reads_both_frameworks_event_files_in_raw_units(tmp_path, capsys):
    import json
    import sys

    from bench import learning

    start = 1_700_000_000.0
    args = learning.parse_learning_args(["--env=doom_basic", "--frames=60000", "--seconds=90.5", "--",
                                         "--seed=3"])
    assert (args.frames, args.threshold, args.only) == (60_000, 40.0, ["sfx", "sf"])
    preset = learning.PRESETS["doom_basic"]
    sf_cmd = learning.build_command("sf", preset, args, tmp_path / "t", "e")
    sfx_cmd = learning.build_command("sfx", preset, args, tmp_path / "t", "e")
    assert sf_cmd[1:3] == ["-m", "sf_examples.vizdoom.train_vizdoom"] and sfx_cmd[1:3] == ["-m", "sfx.train"]
    # SF's --train_for_seconds is an int; the extras come last, so they override the preset
    assert "--train_for_seconds=91" in sf_cmd and sf_cmd[-1] == "--seed=3" and sfx_cmd[-1] == "--seed=3"
    # the same command line (sfx's doom_basic has Sample Factory's reward scale as its default) and the same
    # frames: sfx renders basic as Sample Factory's copy of basic.cfg does
    render = "--doom_render=hud=on,decals=off,particles=off"
    assert [f for f in sfx_cmd[3:] if f != render] == sf_cmd[3:] and render in sfx_cmd
    from sfx.registries import default_cfg
    from sfx.envs.doom.game import parse_render
    assert dict(parse_render(render.split("=", 1)[1])) == {"hud": True, "decals": False, "particles": False}
    assert default_cfg("doom_basic", doom_render=render.split("=", 1)[1]).doom_render  # a valid sfx flag

    # sfx: raw rewards under `reward`; crosses 40 at the third point (frames 24,576, 30 s after launch)
    sfx_dir = tmp_path / "sfx_train_dir" / "doom_basic_sfx"
    _write_scalars(sfx_dir / ".summary" / "0", "reward",
                   [(8192, start + 10, -300.0), (16384, start + 20, 12.5), (24576, start + 30, 45.0),
                    (32768, start + 40, 38.0), (40960, start + 50, 80.0)], extra_tag="fps")
    # Sample Factory: its doom_basic env returns reward x 0.01, so 0.5 logged = 50 raw
    sf_dir = tmp_path / "sf_train_dir" / "doom_basic_sf"
    _write_scalars(sf_dir / ".summary" / "0", "reward/reward",
                   [(20480, start + 25, 0.1), (40960, start + 45, 0.5), (61440, start + 65, 0.75)],
                   extra_tag="perf/_fps")
    (sf_dir / "config.json").write_text(json.dumps({"batched_sampling": False, "reward_scale": 1.0}))

    run = {"status": "done", "reason": "", "start_time": start, "wall_sec": 70.0, "log": "x.log", "command": ["x"]}
    sfx = learning.collect("sfx", preset, run, sfx_dir, 40.0)
    sf = learning.collect("sf", preset, run, sf_dir, 40.0)
    assert sfx["curve"]["reward"] == [-300.0, 12.5, 45.0, 38.0, 80.0]
    assert sfx["curve"]["seconds"] == pytest.approx([10, 20, 30, 40, 50])
    s = sfx["summary"]
    assert (s["frames_to_threshold"], s["seconds_to_threshold"]) == (24576, pytest.approx(30.0))
    assert (s["final_reward"], s["max_reward"], s["total_frames"]) == (80.0, 80.0, 40960)
    assert s["fps"] == pytest.approx((40960 - 8192) / 40.0) and s["reward_factor"] == 1.0
    assert sf["curve"]["reward"] == pytest.approx([10.0, 50.0, 75.0])
    s = sf["summary"]
    assert s["reward_tag"] == "reward/reward" and s["reward_factor"] == 100.0
    assert "RewardScalingWrapper" in s["conversion"]
    assert (s["frames_to_threshold"], s["seconds_to_threshold"]) == (40960, pytest.approx(45.0))
    assert s["final_reward"] == pytest.approx(75.0) and s["total_frames"] == 61440

    # never crossing, a missing tag, SF's batched sampler (sums after --reward_scale)
    never = learning.read_curve({"reward": [(1, start, 5.0)]}, "reward", 1.0, start)
    assert learning.first_crossing(never, 6.0) is None and learning.first_crossing(never, 5.0) == 0
    empty = learning.collect("sf", learning.PRESETS["atari_breakout"], run, sf_dir, 10.0)["summary"]
    assert empty["final_reward"] is None and "RecordEpisodeStatistics_reward" in empty["note"]
    assert learning.sf_reward_factor(preset, {"batched_sampling": True, "reward_scale": 0.5})[0] == 200.0

    table = learning.format_table({"sfx": sfx, "sf": {"summary": empty, "curve": {}}}, 40.0).splitlines()
    assert table[2].split()[:4] == ["sfx", "done", "24,576", "30"]
    assert table[3].split()[-6:] == ["-", "-", "-", "61,440", "70", "1,024"]
    learning.plot({"sfx": sfx, "sf": sf}, 40.0, "t", tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000

    # end to end with stand-ins for both pythons: one writes its events and exits 0, one crashes
    fake_ok, fake_crash = tmp_path / "ok.py", tmp_path / "crash.py"
    fake_ok.write_text(f"#!{sys.executable}\n" + (
        "import pathlib, sys, time\n"
        "from tensorboard.compat.proto.event_pb2 import Event\n"
        "from tensorboard.compat.proto.summary_pb2 import Summary\n"
        "from tensorboard.summary.writer.event_file_writer import EventFileWriter\n"
        "a = dict(x[2:].split('=', 1) for x in sys.argv[3:] if '=' in x)\n"
        "w = EventFileWriter(str(pathlib.Path(a['train_dir']) / a['experiment'] / '.summary' / '0'))\n"
        "values = [Summary.Value(tag=t, simple_value=500.0) for t in ('reward', 'reward/reward')]\n"
        "w.add_event(Event(wall_time=time.time(), step=int(a['train_for_env_steps']), summary=Summary(value=values)))\n"
        "w.close()\n"))
    fake_crash.write_text(f"#!{sys.executable}\nimport sys\nprint('boom: no such env'); sys.exit(3)\n")
    for f in (fake_ok, fake_crash):
        f.chmod(0o755)
    argv = ["--env=cartpole", "--frames=1000", f"--out={tmp_path / 'out'}", f"--sfx_python={fake_ok}"]
    assert learning.main([*argv, f"--sf_python={fake_ok}"]) == 0
    out = capsys.readouterr().out
    assert "frames to 475" in out and "wrote " in out
    summary = json.loads((tmp_path / "out" / "learning_cartpole.json").read_text())
    assert summary["runs"]["sfx"]["summary"]["frames_to_threshold"] == 1000
    assert summary["runs"]["sf"]["curve"]["reward"] == [500.0]
    assert (tmp_path / "out" / "learning_cartpole.png").exists()
    assert learning.main([*argv, f"--sf_python={fake_ok}"]) == 2  # never resumes an old run
    assert "already exist" in capsys.readouterr().err
    argv[2] = f"--out={tmp_path / 'out2'}"
    assert learning.main([*argv, f"--sf_python={fake_crash}", "--only=sf"]) == 1
    out = capsys.readouterr().out
    assert "crashed (exit code 3)" in out and "boom: no such env" in out


def test_learning_bench_counts_only_full_windows_for_sfx():
    """sfx logs `reward` from its first episode on: a lucky average over a few episodes is not a crossing."""
    from bench import learning

    events = {
        "reward": [(0, 100.0, 55.0), (20_000, 105.0, -120.0), (40_000, 110.0, 20.0), (60_000, 115.0, 45.0)],
        "episodes": [(0, 100.0, 3.0), (20_000, 105.0, 90.0), (40_000, 110.0, 150.0), (60_000, 115.0, 220.0)],
    }
    curve = learning.read_curve(events, "reward", 1.0, start_time=90.0)
    assert learning.first_crossing(curve, 40.0) == 0, "without the marks the first point counts"
    learning.mark_full_windows(curve, events, stats_avg=100)
    assert curve.full == [False, False, True, True]
    assert learning.first_crossing(curve, 40.0) == 3
    assert curve.frames[3] == 60_000 and curve.seconds[3] == 25.0


@pytest.mark.slow
def test_ranks_scaling_tiny_mode_trains_one_and_two_ranks_and_times_the_allreduce(tmp_path, capsys):
    import json

    from bench import ranks_scaling

    rc = ranks_scaling.main(["--tiny", "--seconds=4", "--allreduce_steps=1", f"--out_dir={tmp_path}"])
    out = capsys.readouterr().out
    assert rc == 0, out
    summary = json.loads((tmp_path / "ranks_scaling.json").read_text())
    one, two = summary["trainings"]
    assert (one["ranks"], one["workers_per_rank"], two["ranks"], two["workers_per_rank"]) == (1, 2, 2, 1)
    assert one["status"] == two["status"] == "done" and one["samples_per_sec"] > 0, out
    assert len(two["rank_samples_per_sec"]) == 2 and all(x > 0 for x in two["rank_samples_per_sec"])
    assert two["samples_per_sec"] == pytest.approx(sum(two["rank_samples_per_sec"]))
    assert summary["speedup_2_ranks"] > 0 and "2 ranks / 1 rank: " in out
    doom, cartpole = summary["allreduce"]
    assert doom["env"] == "doom_basic" and cartpole["env"] == "gym_CartPole-v1"
    assert doom["status"] == "done" and doom["floats"] > cartpole["floats"] > 0 and doom["ms_per_call"] > 0


@pytest.mark.slow  # three trainings' start-ups: ~40 s on a quiet 2-core machine
def test_replay_bench_runs_every_mix_and_reads_back_steps_reward_and_throughput(tmp_path, capsys):
    """bench/replay.py end to end on a tiny CartPole (flags after ``--`` go to every training): each mix trains,
    its TensorBoard curve is read back into the table, the json and the plot."""
    import json

    from bench import replay

    rc = replay.main(["--env=cartpole", "--seeds=0", "--frames=3000", "--threshold=5", "--keep_going",
                      f"--out={tmp_path}", "--", "--num_workers=1", "--num_envs_per_worker=4", "--rollout=16",
                      "--batch_size=128", "--hidden_size=32"])
    out = capsys.readouterr().out
    assert rc == 0, out
    results = json.loads((tmp_path / "replay_cartpole.json").read_text())["results"]
    assert [r["mix"] for r in results] == ["queue", "standard", "elite"]
    for r in results:
        log = (tmp_path / f"{r['mix']}_s0.log").read_text()
        # a random CartPole policy's episodes last ~20 steps: the 5 bar is met at the first reported average
        assert r["steps_to_threshold"] is not None and r["final"] > 5 and r["fps"] > 0, log[-2000:]
        assert r["curve"][-1][0] >= 3000
    assert out.count("--batch_size=128") == 3 and out.count("--replay_parameters=") == 2
    assert replay.scalars(tmp_path, "standard_s0", "replay/1_standard/fill")
    assert replay.scalars(tmp_path, "elite_s0", "replay/1_custom/distance_mean")
    assert not replay.scalars(tmp_path, "queue_s0", "replay/fresh_share")
    assert (tmp_path / "replay_cartpole.png").stat().st_size > 1000


def test_throughput_rows_flags_and_devices_reach_the_right_commands(tmp_path, capsys, monkeypatch):
    """--sfx_row, --train_flags and the flags after -- reach sfx's doom trainings only; --device both frameworks';
    the pipeline-overhead trainings run the same negligible network on doom in both, the ipc floor the same 8-unit
    MLP on CartPole; bad arguments are one line, exit 2."""
    from bench import throughput

    args = throughput.parse_bench_args(["--device=gpu", "--episode_len=8", "--train_flags=--hidden_size=256",
                                        "--sfx_row", "ungated=--batches_ahead=0 --policy_workers_per_policy=2",
                                        "--sfx_row", "gated=--batches_ahead=1", "--", "--mixed_precision=off"])
    assert args.rows == {"ungated": ["--batches_ahead=0", "--policy_workers_per_policy=2"],
                         "gated": ["--batches_ahead=1"]}
    assert args.wanted == ["raw", "raw_many", "sampler", "raw_len", "sampler_len", "sfx", "ungated", "gated", "sf",
                           "overhead_sampler", "overhead_sfx", "overhead_sf"]
    main = throughput.sfx_training(args, tmp_path, "sfx", [])
    row = throughput.sfx_training(args, tmp_path, "ungated", args.rows["ungated"])
    sf = throughput.sf_training(args, tmp_path)
    assert main.cmd[-2:] == ["--hidden_size=256", "--mixed_precision=off"]
    assert row.cmd[-4:] == ["--hidden_size=256", "--mixed_precision=off", "--batches_ahead=0",
                            "--policy_workers_per_policy=2"]
    assert "--experiment=bench_ungated" in row.cmd
    assert "--device=gpu" in main.cmd and "--device=gpu" in sf.cmd and "--device=cpu" not in sf.cmd
    assert not {"--hidden_size=256", "--mixed_precision=off", "--batches_ahead=0"} & set(sf.cmd)
    o_sfx, o_sf = throughput.overhead_sfx_training(args, tmp_path), throughput.overhead_sf_training(args, tmp_path)
    shared = throughput.overhead_flags(args)
    assert "--use_rnn=False" in shared and "--device=gpu" in shared and "--env=doom_basic" in shared
    assert "--normalize_input=False" in shared
    assert o_sfx.cmd[3:3 + len(shared)] == shared and o_sf.cmd[3:3 + len(shared)] == shared
    assert o_sfx.cmd[1:3] == ["-m", "bench.negligible_model"] and o_sf.cmd[1:3] == ["-m", "bench.sf_negligible_model"]
    assert "--encoder_type=bench_pooled" in o_sfx.cmd and "--mixed_precision=off" not in o_sfx.cmd
    from bench import negligible_model, sf_negligible_model  # the constants bench.throughput spells out

    assert (throughput.OVERHEAD_ENCODER, throughput.OVERHEAD_WIDTH) == (negligible_model.ENCODER_NAME,
                                                                        negligible_model.WIDTH)
    assert (sf_negligible_model.GRID, sf_negligible_model.WIDTH) == (negligible_model.GRID, negligible_model.WIDTH)
    assert o_sf.env["PYTHONPATH"] == str(throughput.REPO_ROOT)
    i_sfx, i_sf = throughput.ipc_sfx_training(args, tmp_path), throughput.ipc_sf_training(args, tmp_path)
    assert "--hidden_size=8" in i_sfx.cmd and "--env=gym_CartPole-v1" in i_sfx.cmd
    i = i_sf.cmd.index("--encoder_mlp_layers")
    assert i_sf.cmd[i + 1:i + 3] == ["8", "8"] and i_sf.cmd[1:4] == ["-m", "sf_examples.train_gym_env",
                                                                    "--env=CartPole-v1"]
    assert throughput.capped_flags(args, ["--env=doom_basic", "--num_workers=2"]) == [
        "--env=bench_cap_doom_basic", "--num_workers=2", "--bench_cap_steps=8"]

    # --sfx_env_flags: every sfx row (the measured rows' shared flags, trainings, the overhead pair), no SF row
    env_args = throughput.parse_bench_args(["--sfx_env_flags=--resize_interpolation=linear", "--train_flags=--a=1"])
    linear = "--resize_interpolation=linear"
    assert linear in throughput.sampling_flags(env_args)
    assert linear in throughput.sfx_training(env_args, tmp_path, "sfx", []).cmd
    assert linear in throughput.overhead_sfx_training(env_args, tmp_path).cmd
    assert linear in throughput.overhead_sampler_flags(env_args)
    assert linear not in throughput.sf_training(env_args, tmp_path).cmd
    assert linear not in throughput.overhead_sf_training(env_args, tmp_path).cmd
    assert env_args.extra == [linear, "--a=1"]

    only = throughput.parse_bench_args(["--only=overhead", "--only=rows", "--sfx_row=a=--x=1", "--skip_sf"])
    assert only.wanted == ["a", "overhead_sampler", "overhead_sfx"]
    assert throughput.parse_bench_args([]).wanted == ["raw", "raw_many", "sampler", "sfx", "sf", "overhead_sampler",
                                                      "overhead_sfx", "overhead_sf"]
    assert throughput.parse_bench_args(["--only=ipc", "--skip_sf"]).wanted == ["ipc_sampler", "ipc_sfx"]
    bad = {("--sfx_row", "ungated"): "NAME=", ("--sfx_row", "sfx=--x=1"): "taken",
           ("--sfx_row", "a=batches_ahead=0"): "starting with --", ("--only", "nope"): "not a row",
           ("--only", "sampler_len"): "--episode_len", ("--only", "rows"): "none is given",
           ("--batch_size", "0"): "positive", ("--train_flags", "'open"): "cannot be split",
           ("--sfx_env_flags", "'open"): "--sfx_env_flags=.*cannot be split"}
    for argv, message in bad.items():
        with pytest.raises(throughput.BenchArgError, match=message):
            throughput.parse_bench_args(list(argv))
    assert throughput.main(["--only", "nope", f"--out_dir={tmp_path}"]) == 2
    assert "bench.throughput: error: --only=nope is not a row" in capsys.readouterr().err
    monkeypatch.setattr(throughput, "gpu_info", lambda: {})
    assert throughput.main(["--device=gpu", f"--out_dir={tmp_path}"]) == 2
    assert "no CUDA GPU is visible" in capsys.readouterr().err


def test_throughput_reads_a_trainings_window_lengths_lag_and_gpu_samples(tmp_path, monkeypatch):
    """measure_training on a stand-in that prints sfx's status line: the slope over the window, the last episode
    length and lag inside it, and on a GPU (a stand-in nvidia-smi) its utilisation; Sample Factory's episode
    length from its len/len in frames; the GPU column of the table."""
    import os
    import sys

    from bench import throughput

    fake = tmp_path / "fake_train.py"
    fake.write_text("import time\nfor i in range(200):\n"
                    "    print(f'[x] FPS (10s/60s/300s) 1/1/1 | samples/s 1 | env steps {i * 1000:,} (0.0%) | "
                    "reward 1.00 len {10 + i} lag {i / 10:.1f}/3 | elapsed 1s', flush=True)\n"
                    "    time.sleep(0.1)\n")
    # a stand-in nvidia-smi: the GPU's name, then utilisation 40 % and 1200 MiB every 0.1 s
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncase \"$*\" in *name*) echo 'NVIDIA H100 80GB HBM3, 81559 MiB, 580.65';; "
                   "*) while true; do echo '40, 1200'; sleep 0.1; done;; esac\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert throughput.gpu_info() == {"name": "NVIDIA H100 80GB HBM3", "memory": "81559 MiB", "driver": "580.65",
                                     "count": 1}
    for device in ("cpu", "gpu"):
        args = throughput.parse_bench_args(["--seconds=1", "--warmup=0.3", f"--device={device}"])
        training = throughput.Training(f"fake_{device}", [sys.executable, str(fake)], throughput.SFX_COUNTER, {},
                                       throughput.SFX_STATS)
        r = throughput.run_training(training, args, tmp_path)
        assert r["status"] == "done", r
        assert 4000 < r["fps"] < 15000, r  # 1000 frames per ~0.1 s, sleep and a busy machine aside
        assert r["episode_len"] >= 13 and r["policy_lag"] == pytest.approx((r["episode_len"] - 10) / 10), r
        if device == "cpu":
            assert "gpu_util_mean" not in r
        else:
            assert r["gpu_util_mean"] == 40.0 and r["gpu_mem_max_mib"] == 1200.0 and r["gpu_samples"] >= 3, r

    exp = tmp_path / "sf_train_dir" / "bench_sf"
    _write_scalars(exp / ".summary" / "0", "len/len", [(100, 1.0, 200.0), (200, 2.0, 188.0)])
    assert throughput.sf_episode_len(exp, 4)(tmp_path) == {"episode_len": 47.0}
    assert throughput.sf_episode_len(tmp_path / "none", 4)(tmp_path) == {}
    m = throughput.SF_STATS["policy_lag"].search("Policy #0 lag: (min: 0.0, avg: 1.7, max: 4.0)")
    assert m and float(m.group(1)) == 1.7

    gpu = throughput.GpuMonitor(False)
    gpu.samples = [(1.0, 10.0, 500.0), (2.0, 30.0, 700.0), (9.0, 90.0, 900.0)]
    assert gpu.summary(0.5, 2.5) == {"gpu_util_mean": 20.0, "gpu_util_max": 30.0, "gpu_mem_max_mib": 700.0,
                                     "gpu_samples": 2}
    rows = [("sfx training", {"status": "done", "fps": 5000.0, "episode_len": 9.0, "policy_lag": 1.2,
                              "gpu_util_mean": 20.0}),
            ("raw", {"status": "done", "fps": 9000.0})]
    table = throughput.format_table(rows).splitlines()
    assert table[0].split()[-2:] == ["%", "status"] and table[2].split()[-5:] == ["5,000", "9.0", "1.2", "20", "done"]


def test_throughput_ratios_cover_episode_length_rows_and_overhead():
    from bench import throughput

    args = throughput.parse_bench_args(["--episode_len=8", "--sfx_row=ungated=--batches_ahead=0"])
    fps = {"raw": 100.0, "raw_many": 80.0, "sampler": 90.0, "raw_len": 50.0, "sampler_len": 40.0, "sfx": 30.0,
           "ungated": 36.0, "sf": 20.0, "overhead_sampler": 1000.0, "overhead_sfx": 850.0, "overhead_sf": float("nan")}
    r = throughput.compute_ratios({k: {"fps": v} for k, v in fps.items()}, ["ungated"])
    assert r["sampler_len_over_raw_len"] == 0.8 and r["sfx_over_sampler_len"] == 0.75
    assert r["ungated_over_sfx"] == pytest.approx(1.2) and r["ungated_over_sample_factory"] == 1.8
    assert r["overhead_sfx"] == 0.85 and r["overhead_sf"] != r["overhead_sf"]
    text = throughput.format_ratios(r, args)
    assert "at 8-step episodes: sampler / raw = 0.80; training / sampler: sfx 0.75, ungated 0.90, sf 0.50" in text
    assert "pipeline overhead (training / sampler, doom_basic, negligible-compute model): sfx 0.85" in text
    assert "message-passing floor" not in text  # the ipc rows were not measured
    fps.update(ipc_sampler=100.0, ipc_sfx=30.0)
    r = throughput.compute_ratios({k: {"fps": v} for k, v in fps.items()}, ["ungated"])
    assert "message-passing floor (training / sampler, CartPole, 8-unit MLP): sfx 0.30" in throughput.format_ratios(r, args)
    assert "Sample Factory 2.1.1 -" in text


def test_episode_cap_family_cuts_episodes_of_any_single_agent_env(tmp_path):
    import bench.episode_cap  # noqa: F401  registers bench_cap_
    from sfx.registries import parse_args

    cfg = parse_args(["--env=bench_cap_gym_CartPole-v1", "--bench_cap_steps=5", f"--train_dir={tmp_path}",
                      "--device=cpu"], resume=False)
    assert cfg.encoder_type == "mlp"  # the inner family's defaults hold
    env = make_env(cfg)
    env.reset(seed=0)
    ends = []
    for t in range(1, 31):
        _, _, terminated, truncated, infos = env.step([t % 2])  # alternating pushes: CartPole stays up 5 steps
        if "episode" in infos[0]:
            ends.append((t, infos[0]["episode"]["len"], terminated[0], truncated[0]))
    env.close()
    assert ends == [(5 * k, 5, False, True) for k in range(1, 7)]
    with pytest.raises(ConfigError, match="--bench_cap_steps=N"):
        parse_args(["--env=bench_cap_gym_CartPole-v1", f"--train_dir={tmp_path}"], resume=False)
    with pytest.raises(ConfigError, match="matches no env family"):
        parse_args(["--env=bench_cap_nothing_here", "--bench_cap_steps=3", f"--train_dir={tmp_path}"], resume=False)


def test_gpu_wheelhouse_script_refuses_bad_arguments_before_downloading(tmp_path):
    import subprocess

    from bench.throughput_common import REPO_ROOT

    script = str(REPO_ROOT / "scripts" / "gpu_wheelhouse.sh")
    for argv, message in ((["--bogus"], "unknown argument '--bogus'"), (["--python", "312"], "give MAJOR.MINOR"),
                          (["--extras", "doom,nosuch"], "--extras names 'nosuch'; setup.py's extras are: render")):
        run = subprocess.run(["bash", script, *argv, "--out", str(tmp_path / "wh")], capture_output=True, text=True,
                             timeout=60)
        assert run.returncode != 0 and message in run.stderr, run.stderr
    assert not list((tmp_path / "wh").glob("*/*.whl"))


@pytest.mark.parametrize("shape", [(9, 3, 72, 128), (5, 4, 6, 10), (1, 1, 2, 2)])
@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_grid_means_are_adaptive_average_pooling(shape, layout):
    """The negligible encoders' pooling (bench/grid_pool.py) computes what adaptive_avg_pool2d does, in both
    memory layouts the two frameworks hand their encoders, only cheaper."""
    from bench.grid_pool import grid_means

    x = torch.randint(0, 256, shape).float().contiguous(memory_format=layout)
    expected = torch.nn.functional.adaptive_avg_pool2d(x, 2).flatten(1)
    # integer-valued inputs: both sum exactly in float32 until the one division, so the two agree to its rounding
    torch.testing.assert_close(grid_means(x), expected, rtol=2 ** -23, atol=0)
    with pytest.raises(ValueError, match="3 x 10 image does not split into a 2 x 2 grid"):
        grid_means(torch.zeros(1, 1, 3, 10))
