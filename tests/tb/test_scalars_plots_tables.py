"""load_scalars, curves, plots and tables against event files written by real sfx trainings."""

import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest
from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
from tensorboard.compat.proto import event_pb2

from sfx_tb import TbError, aggregate_curves, load_scalars, plot_curves, select_experiments, summary_table
from sfx_tb.cli import main
from sfx_tb.table import to_markdown


RUN = "sweep"  # the run folder of the conftest's sweep
GROUPS = {"sweep/cartpole_lea=0.0001", "sweep/cartpole_lea=0.001"}


def raw_scalars(folder):
    """Sorted [(tag, step, value)] read straight from the event protos, without TensorBoard's accumulator."""
    out = []
    for path in sorted(folder.glob("events.out.tfevents.*")):
        for raw in RawEventFileLoader(str(path)).Load():
            event = event_pb2.Event.FromString(raw)
            for v in event.summary.value:
                if v.WhichOneof("value") == "simple_value":
                    out.append((v.tag, event.step, v.simple_value))
    return sorted(out)


@pytest.fixture(scope="module")
def df(train_root):
    return load_scalars(RUN, dir=train_root)


def test_the_sweep_groups_by_seed_from_cfg_json(train_root, sweep_experiments):
    chosen, _ = select_experiments(["*"], train_root)
    assert [e.name for e in chosen] == [f"{RUN}/{n}" for n in sweep_experiments]
    for e in chosen:
        seed, lr = sweep_experiments[e.name.split("/")[1]]
        assert e.cfg["seed"] == seed and e.seed == seed and e.cfg["learning_rate"] == lr
        assert e.group == f"{RUN}/cartpole_lea={lr!r}"


def test_dataframe_columns_and_types(df, sweep_experiments):
    assert list(df.columns) == ["experiment", "group", "seed", "policy", "tag", "step", "wall_time", "value"]
    assert str(df["seed"].dtype) == "Int64" and df["step"].dtype == np.int64 and df["value"].dtype == np.float64
    assert set(df["experiment"]) == {f"{RUN}/{n}" for n in sweep_experiments}
    assert set(df["group"]) == GROUPS and set(df["policy"]) == {0}
    assert {"reward", "len", "fps", "samples_per_sec", "loss/policy", "loss/value", "policy_lag"} <= set(df["tag"])
    for name, (seed, _) in sweep_experiments.items():
        assert set(df.loc[df["experiment"] == f"{RUN}/{name}", "seed"]) == {seed}


def test_dataframe_values_equal_the_event_files_and_status_json(df, train_root, sweep_experiments):
    for name in sweep_experiments:
        folder = train_root / RUN / name
        raw = raw_scalars(folder / ".summary" / "0")
        mine = df[df["experiment"] == f"{RUN}/{name}"]
        # every point, repeated steps included (the last periodic and the final summary may share one)
        assert len(mine) == len(raw) > 50
        assert sorted((r.tag, r.step, r.value) for r in mine.itertuples()) == raw
        status = json.loads((folder / "status.json").read_text())
        rewards = mine[mine["tag"] == "reward"].sort_values("step")
        assert rewards["value"].iloc[-1] == pytest.approx(status["reward"][0], abs=0.006)
        assert mine["step"].max() == status["env_steps"]
        assert (np.diff(rewards["step"]) >= 0).all()


def test_metrics_and_policy_filters(train_root, sweep_experiments):
    some = load_scalars([f"{RUN}/00_*"], dir=train_root, metrics=["reward", "loss/*"])
    assert set(some["tag"]) == {"reward", "loss/total", "loss/policy", "loss/value", "loss/entropy", "loss/kl"}
    assert set(some["experiment"]) == {f"{RUN}/{next(iter(sweep_experiments))}"}
    assert load_scalars(RUN, dir=train_root, metrics="reward", policy=1).empty
    with pytest.raises(TbError, match=r"metric 'rewrd' is not a scalar.*near: reward"):
        load_scalars(RUN, dir=train_root, metrics=["rewrd"])
    with pytest.raises(TbError, match="matches none of the 4 experiment folders.*near names"):
        load_scalars("*cartpole_see=9*", dir=train_root)


def test_curves_average_seeds_interpolated_on_a_common_grid(df):
    metric = "loss/value"
    agg = aggregate_curves(df, metric, points=50)
    for group in GROUPS:
        runs = [r.sort_values("step") for _, r in df[(df["group"] == group) & (df["tag"] == metric)].groupby("experiment")]
        assert len(runs) == 2
        lo = max(r["step"].min() for r in runs)
        hi = min(r["step"].max() for r in runs)
        grid = np.linspace(lo, hi, 50)
        by_hand = np.stack([np.interp(grid, r["step"], r["value"]) for r in runs])
        mine = agg[agg["group"] == group]
        np.testing.assert_allclose(mine["x"], grid)
        np.testing.assert_allclose(mine["mean"], by_hand.mean(axis=0), rtol=1e-9)
        np.testing.assert_allclose(mine["std"], by_hand.std(axis=0), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(mine["min"], by_hand.min(axis=0))
        assert (mine["n"] == 2).all()


def test_smoothing_is_a_trailing_moving_average(df):
    one = df[df["experiment"] == df["experiment"].iloc[0]]
    agg = aggregate_curves(one, "fps", smooth=3, points=2)
    run = one[one["tag"] == "fps"].sort_values("step")
    run = run.drop_duplicates("step", keep="last")
    smoothed = run["value"].rolling(3, min_periods=1).mean()
    assert agg["mean"].iloc[0] == pytest.approx(smoothed.iloc[0])
    assert agg["mean"].iloc[-1] == pytest.approx(smoothed.iloc[-1])


def test_time_axis_starts_at_zero_per_run(df):
    agg = aggregate_curves(df, "fps", x="time", points=20)
    assert agg["x"].min() >= 0 and agg["x"].max() < 60


def test_plot_writes_png_svg_and_pdf(df, tmp_path):
    png = tmp_path / "curves.png"
    fig = plot_curves(df, ["reward", "fps", "loss/value"], out=png, title="CartPole")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == ["reward", "fps", "loss/value"]
    assert axes[0].get_xlabel() == "env steps"
    labels = axes[0].get_legend_handles_labels()[1]
    assert labels == [f"{g} (2 seeds)" for g in sorted(GROUPS)]
    plot_curves(df, "fps", x="time", spread="minmax", out=tmp_path / "c", fmt="svg")
    svg = (tmp_path / "c.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    plot_curves(df, "reward", spread="none", out=tmp_path / "c.pdf")
    assert (tmp_path / "c.pdf").read_bytes()[:5] == b"%PDF-"


def test_plot_command_line(train_root, tmp_path, capsys):
    out = tmp_path / "figs" / "curves.png"
    assert main(["plot", "*lea=0.001*", "--dir", str(train_root), "--metric", "reward", "--metric", "fps",
                 "--x", "time", "--smooth", "2", "--out", str(out), "--format", "svg"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert not out.exists() and out.with_suffix(".svg").stat().st_size > 5_000


def hand_table(df, metric, last_frac):
    rows = {}
    for group, g in df.groupby("group"):
        finals, steps, fps = [], [], []
        for _, run in g.groupby("experiment"):
            values = run[run["tag"] == metric].sort_values("step")["value"].to_numpy()
            k = max(1, math.ceil(last_frac * len(values)))
            finals.append(values[-k:].mean())
            steps.append(run["step"].max())
            f = run[(run["tag"] == "fps") & (run["value"] > 0)].sort_values("step")["value"].to_numpy()
            fps.append(f[-max(1, math.ceil(last_frac * len(f))):].mean())
        rows[group] = (np.mean(finals), np.std(finals), len(finals), min(steps), np.mean(fps))
    return rows


@pytest.mark.parametrize("metric, last_frac", [("reward", 0.1), ("loss/value", 0.25), ("fps", 1.0)])
def test_table_values_by_hand(df, metric, last_frac):
    table = summary_table(df, metric, last_frac=last_frac)
    assert list(table.columns) == ["group", "seeds", f"{metric}_mean", f"{metric}_std", "env_steps", "fps"]
    expected = hand_table(df, metric, last_frac)
    assert set(table["group"]) == set(expected)
    for row in table.itertuples(index=False):
        mean, std, seeds, steps, fps = expected[row.group]
        assert row.seeds == seeds == 2
        assert row[2] == pytest.approx(mean) and row[3] == pytest.approx(std)
        assert row.env_steps == steps and row.fps == pytest.approx(fps)


def test_table_command_markdown_and_csv(train_root, tmp_path, capsys):
    csv = tmp_path / "out.csv"
    assert main(["table", RUN, "--dir", str(train_root), "--metric", "reward", "--metric", "len",
                 "--last_frac", "0.5", "--csv", str(csv)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "| group | seeds | reward (mean ± std) | len (mean ± std) | env steps | FPS |"
    assert lines[1].startswith("| --- | ---: |") and len(lines) == 2 + len(GROUPS)
    written = pd.read_csv(csv)
    expected = summary_table(load_scalars(RUN, dir=train_root), ["reward", "len"], last_frac=0.5)
    pd.testing.assert_frame_equal(written, expected, check_dtype=False)
    for line, row in zip(lines[2:], expected.itertuples(index=False)):
        assert line.startswith(f"| {row.group} | 2 | {row.reward_mean:.4g} ± ")
        assert f"| {row.env_steps:,} |" in line


def test_markdown_shows_missing_values_as_dashes():
    table = pd.DataFrame({"group": ["a|b"], "seeds": [1], "reward_mean": [1.5], "reward_std": [0.0],
                          "env_steps": pd.array([None], dtype="Int64"), "fps": [float("nan")]})
    assert to_markdown(table).splitlines()[2] == "| a\\|b | 1 | 1.5 ± 0 | - | - |"


def test_a_group_with_one_seed_has_std_zero(train_root, tmp_path, sweep_experiments):
    root = tmp_path / "td"
    name = next(iter(sweep_experiments))
    shutil.copytree(train_root / RUN / name, root / "solo", ignore=shutil.ignore_patterns("checkpoint_p*"))
    table = summary_table(load_scalars("solo", dir=root), "reward")
    assert table["seeds"].tolist() == [1] and table["reward_std"].tolist() == [0.0]


@pytest.mark.parametrize("argv, message", [
    (["table", RUN, "--last_frac", "0"], "--last_frac 0.0 is not allowed"),
    (["table", RUN, "--metric", "rewardd"], "metric 'rewardd' is not a scalar of the selected experiments; near: reward"),
    (["plot", RUN, "--out", "curves.jpg"], "cannot tell the image format"),
    (["plot", "*doom*"], "'*doom*' matches none of the 4 experiment folders"),
    (["plot", RUN, "--metric", "nope"], "metric 'nope' is not a scalar"),
])
def test_bad_input_is_one_error_line(train_root, argv, message, capsys):
    assert main([*argv, "--dir", str(train_root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sfx.tb: error: ") and message in err and err.count("\n") == 1


def test_argparse_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["plot", "x", "--spread", "wide"])
    assert info.value.code == 2 and "invalid choice: 'wide'" in capsys.readouterr().err


def test_each_policy_of_an_experiment_is_a_run(train_root, tmp_path, sweep_experiments):
    # a two-policy experiment (as --num_policies=2 writes it): .summary/0 and .summary/1
    root = tmp_path / "td"
    name = next(iter(sweep_experiments))
    shutil.copytree(train_root / RUN / name, root / "pbt" / name, ignore=shutil.ignore_patterns("checkpoint_p*"))
    shutil.copytree(root / "pbt" / name / ".summary" / "0", root / "pbt" / name / ".summary" / "1")
    both = load_scalars("pbt", dir=root, metrics="reward")
    assert set(both["policy"]) == {0, 1}
    one = both[both["policy"] == 1]
    pd.testing.assert_frame_equal(load_scalars("pbt", dir=root, metrics="reward", policy=1), one.reset_index(drop=True))
    table = summary_table(load_scalars("pbt", dir=root), "reward")
    assert table["seeds"].tolist() == [1] and table["reward_std"].tolist() == [0.0]
