"""``table --per_task``: per-task and suite scalars of multi-task trainings, from event files written here."""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from sfx_tb import TbError, load_scalars
from sfx_tb.cli import main, suite_csv_path
from sfx_tb.table import per_task_markdown, per_task_table, split_task_tag, suite_markdown, suite_table

REPO = Path(__file__).resolve().parents[2]
SEE1, SEE2 = "mt/00_multi_see=1", "mt/01_multi_see=2"

# experiment -> [(tag, step, value)], written in this order with increasing wall times. Out-of-order
# steps (a resumed training) and a repeated step (the newest point wins) are on purpose.
POINTS = {
    SEE1: [
        ("reward", 100, 1.0), ("reward", 300, 3.0), ("fps", 300, 900.0),
        ("task/atari_pong/reward", 100, -21.0), ("task/atari_pong/reward", 300, 14.6),
        ("task/atari_pong/reward", 200, -5.0),  # written last, but not the last step
        ("task/atari_pong/hns", 100, 0.0), ("task/atari_pong/hns", 300, 100.0),
        ("task/atari_pong/len", 300, 800.0),
        ("task/atari_breakout/reward", 100, 2.0), ("task/atari_breakout/reward", 200, 30.5),
        ("task/atari_breakout/hns", 200, 100.0), ("task/atari_breakout/len", 200, 1500.0),
        ("task/gym_CartPole-v1/reward", 100, 20.0), ("task/gym_CartPole-v1/reward", 300, 500.0),
        ("task/gym_CartPole-v1/len", 300, 500.0),
        ("suite/hns_mean", 100, 10.0), ("suite/hns_mean", 300, 100.0), ("suite/hns_median", 300, 100.0),
        ("suite/hns_mean_capped", 300, 100.0), ("suite/num_tasks", 300, 2.0),
    ],
    SEE2: [
        ("reward", 300, 5.0),
        ("task/atari_pong/reward", 100, 0.0), ("task/atari_pong/reward", 300, 1.0),
        ("task/atari_pong/reward", 300, 2.0),  # same step again: the newer point wins
        ("task/atari_pong/hns", 300, 60.0), ("task/atari_pong/len", 300, 700.0),
        ("task/atari_breakout/reward", 300, 59.3), ("task/atari_breakout/hns", 300, 200.0),
        ("task/atari_breakout/len", 300, 2000.0),
        ("task/atari_atlantis/reward", 300, 29028.1), ("task/atari_atlantis/hns", 300, 100.0),
        ("task/gym_CartPole-v1/reward", 300, 250.0), ("task/gym_CartPole-v1/len", 300, 250.0),
        ("suite/hns_mean", 400, 120.0), ("suite/hns_median", 400, 100.0), ("suite/hns_mean_capped", 400, 86.67),
    ],
    "single_task": [("reward", 100, 7.0), ("len", 100, 70.0), ("fps", 100, 500.0)],
}

PER_TASK_MARKDOWN = """\
| experiment | task | reward | hns | len | env steps |
| --- | --- | ---: | ---: | ---: | ---: |
| mt/00_multi_see=1 | atari_breakout | 30.5 | 100 | 1500 | 200 |
| mt/00_multi_see=1 | atari_pong | 14.6 | 100 | 800 | 300 |
| mt/00_multi_see=1 | gym_CartPole-v1 | 500 | - | 500 | 300 |
| mt/01_multi_see=2 | atari_atlantis | 29,028 | 100 | - | 300 |
| mt/01_multi_see=2 | atari_breakout | 59.3 | 200 | 2000 | 300 |
| mt/01_multi_see=2 | atari_pong | 2 | 60 | 700 | 300 |
| mt/01_multi_see=2 | gym_CartPole-v1 | 250 | - | 250 | 300 |"""

SUITE_MARKDOWN = """\
| experiment | tasks | hns mean | hns median | hns mean capped | num tasks | env steps |
| --- | ---: | ---: | ---: | ---: | ---: | ---: |
| mt/00_multi_see=1 | 3 | 100 | 100 | 100 | 2 | 300 |
| mt/01_multi_see=2 | 4 | 120 | 100 | 86.67 | - | 400 |"""


def write_events(folder: Path, points, start: float = 1_000_000.0) -> None:
    """An event file as a SummaryWriter's add_scalar leaves it (float32 simple values)."""
    writer = EventFileWriter(str(folder))
    for i, (tag, step, value) in enumerate(points):
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=value)])
        writer.add_event(Event(wall_time=start + i, step=step, summary=summary))
    writer.close()


def f32(value: float) -> float:
    return float(np.float32(value))


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("per_task")
    for name, points in POINTS.items():
        write_events(root / name / ".summary" / "0", points)
    return root


@pytest.fixture(scope="module")
def df(root):
    return load_scalars("mt", dir=root)


@pytest.mark.parametrize("tag, expected", [
    ("task/atari_pong/reward", ("atari_pong", "reward")),
    ("task/dmlab_rooms_watermaze/hns", ("dmlab_rooms_watermaze", "hns")),
    ("task/a/b/len", ("a/b", "len")),
    ("task/atari_pong", None), ("task//reward", None), ("task/atari_pong/", None), ("reward", None),
    ("suite/hns_mean", None),
])
def test_split_task_tag(tag, expected):
    assert split_task_tag(tag) == expected


def test_per_task_table_takes_the_last_point_in_step_order(df):
    table = per_task_table(df)
    assert list(table.columns) == ["experiment", "group", "seed", "policy", "task", "reward", "hns", "len", "env_steps"]
    assert table.attrs["metrics"] == ["reward", "hns", "len"]
    rows = {(r.experiment, r.task): r for r in table.itertuples(index=False)}
    assert list(rows) == [(SEE1, "atari_breakout"), (SEE1, "atari_pong"), (SEE1, "gym_CartPole-v1"),
                          (SEE2, "atari_atlantis"), (SEE2, "atari_breakout"), (SEE2, "atari_pong"),
                          (SEE2, "gym_CartPole-v1")]
    pong = rows[(SEE1, "atari_pong")]
    assert (pong.reward, pong.hns, pong.len, pong.env_steps) == (f32(14.6), 100.0, 800.0, 300)
    assert rows[(SEE2, "atari_pong")].reward == 2.0
    assert rows[(SEE1, "atari_breakout")].env_steps == 200
    assert np.isnan(rows[(SEE1, "gym_CartPole-v1")].hns) and np.isnan(rows[(SEE2, "atari_atlantis")].len)
    assert set(table["group"]) == {"mt/multi"} and list(table["seed"]) == [1, 1, 1, 2, 2, 2, 2]
    assert set(table["policy"]) == {0}


def test_last_frac_averages_the_last_points(df):
    table = per_task_table(df, "reward", last_frac=0.5)
    assert list(table.columns[5:]) == ["reward", "env_steps"]
    pong = table[(table["experiment"] == SEE1) & (table["task"] == "atari_pong")]
    assert pong["reward"].item() == pytest.approx((-5.0 + f32(14.6)) / 2)  # ceil(0.5 * 3) = 2 points


def test_metric_choice_and_patterns(df):
    assert per_task_table(df, ["hns"]).attrs["metrics"] == ["hns"]
    assert per_task_table(df, ["len", "re*"]).attrs["metrics"] == ["len", "reward"]
    with pytest.raises(TbError, match=r"metric 'score' is not a per-task scalar \(task/<name>/score\).*"
                                      r"their per-task scalars: reward, hns, len"):
        per_task_table(df, ["score"])


def test_suite_table(df):
    suite = suite_table(df)
    assert list(suite.columns) == ["experiment", "group", "seed", "policy", "tasks", "hns_mean", "hns_median",
                                   "hns_mean_capped", "num_tasks", "env_steps"]
    assert suite["experiment"].tolist() == [SEE1, SEE2] and suite["tasks"].tolist() == [3, 4]
    assert suite["hns_mean"].tolist() == [100.0, 120.0]
    assert suite["hns_mean_capped"].tolist() == [100.0, f32(86.67)]
    assert suite["num_tasks"].iloc[0] == 2 and np.isnan(suite["num_tasks"].iloc[1])
    assert suite["env_steps"].tolist() == [300, 400]
    assert suite_table(df[~df["tag"].str.startswith("suite/")]).empty


def test_markdown_forms(df):
    assert per_task_markdown(per_task_table(df)) == PER_TASK_MARKDOWN
    assert suite_markdown(suite_table(df)) == SUITE_MARKDOWN


def test_command_line_markdown_and_csv(root, tmp_path, capsys):
    csv = tmp_path / "tasks.csv"
    assert main(["table", "mt", "--dir", str(root), "--per_task", "--csv", str(csv)]) == 0
    captured = capsys.readouterr()
    assert captured.out == PER_TASK_MARKDOWN + "\n\n" + SUITE_MARKDOWN + "\n"
    assert suite_csv_path(str(csv)) == tmp_path / "tasks_suite.csv"
    assert captured.err == f"wrote {csv}\nwrote {tmp_path / 'tasks_suite.csv'}\n"
    df = load_scalars("mt", dir=root)
    pd.testing.assert_frame_equal(pd.read_csv(csv), per_task_table(df), check_dtype=False)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "tasks_suite.csv"), suite_table(df), check_dtype=False)


def test_command_line_metric_and_last_frac(root, capsys):
    assert main(["table", "*see=1*", "--dir", str(root), "--per_task", "--metric", "hns", "--last_frac", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| experiment | task | hns | env steps |"
    assert lines[3] == "| mt/00_multi_see=1 | atari_pong | 50 | 300 |"  # mean of 0 and 100


def test_runs_without_tasks_are_named_and_left_out(root, capsys):
    assert main(["table", "mt", "single_task", "--dir", str(root), "--per_task"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "sfx.tb: note: no per-task scalars in 1 experiment(s), left out: single_task\n"
    assert captured.out.startswith(PER_TASK_MARKDOWN)


def test_no_task_scalars_is_one_error_line(root, capsys):
    assert main(["table", "single_task", "--dir", str(root), "--per_task"]) == 2
    err = capsys.readouterr().err
    assert err == ("sfx.tb: error: the 1 selected experiment(s) have no per-task scalars (task/<name>/reward): "
                   "trained with one task? --per_task needs a multi-task training "
                   "(--env=multitask --multitask_envs=..., or --env=dmlab_30)\n")


def test_the_plain_table_is_unchanged_by_the_option(root, capsys):
    assert main(["table", "single_task", "--dir", str(root)]) == 0
    assert capsys.readouterr().out.splitlines()[2] == "| single_task | 1 | 7 ± 0 | 100 | 500 |"


def test_a_second_policy_gets_a_column(tmp_path, capsys):
    write_events(tmp_path / "pbt" / ".summary" / "0", [("task/atari_pong/reward", 10, 1.0)])
    write_events(tmp_path / "pbt" / ".summary" / "1", [("task/atari_pong/reward", 20, 2.0),
                                                       ("suite/hns_mean", 20, 5.0)])
    assert main(["table", "pbt", "--dir", str(tmp_path), "--per_task"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "| experiment | policy | task | reward | env steps |",
        "| --- | ---: | --- | ---: | ---: |",
        "| pbt | 0 | atari_pong | 1 | 10 |",
        "| pbt | 1 | atari_pong | 2 | 20 |",
        "",
        "| experiment | policy | tasks | hns mean | env steps |",
        "| --- | ---: | ---: | ---: | ---: |",
        "| pbt | 1 | 1 | 5 | 20 |",
    ]
    assert main(["table", "pbt", "--dir", str(tmp_path), "--per_task", "--policy", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[2] == "| pbt | 1 | atari_pong | 2 | 20 |"


def test_per_task_mode_loads_no_torch(root):
    code = textwrap.dedent(f"""
        import contextlib, io, sys
        from sfx_tb.cli import main
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["table", "mt", "--dir", {str(root)!r}, "--per_task"]) == 0
        print(sorted(m for m in ("torch", "sfx") if m in sys.modules))
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
