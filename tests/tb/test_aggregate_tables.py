"""sfx.tb's aggregates over seeds and tasks (issue 38): ``table --aggregate`` / ``--eval``, ``plot --profile`` and
``evaluate``, checked against hand-computed values; the evaluation results files are the ones sfx.enjoy writes
(their fields: sfx/experiment/results.py)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from sfx.tb import main as sfx_tb_main
from sfx_tb import stats
from sfx_tb.aggregate import assign_methods, normalize, score_matrix, scores_from_results
from sfx_tb.cli import main as cli_main
from sfx_tb.experiments import select_experiments

PONG = (-20.7, 14.6)       # Atari-57 random and human scores (sfx.envs.task_scores)
BREAKOUT = (1.7, 30.5)


def _experiment(root: Path, name: str, env: str, seed: int, lr: float, mean: float | None) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "cfg.json").write_text(json.dumps({
        "env": env, "seed": seed, "learning_rate": lr, "experiment": folder.name, "num_policies": 1,
        "explicit_args": ["env", "seed", "learning_rate", "experiment", "train_dir"]}))
    if mean is not None:
        (folder / "eval_results_p0.json").write_text(json.dumps({
            "format": "sfx.eval_results/1", "experiment": folder.name, "env": env, "policy_index": 0,
            "episodes": 3, "mean_reward": mean, "env_steps": 1000}))


def _raw(baseline: tuple[float, float], hns: float) -> float:
    random, human = baseline
    return random + hns * (human - random)


# human-normalised scores of the runs below: method (learning rate) -> task -> per seed
HNS = {0.1: {"atari_pong": [0.2, 0.4, 0.6], "atari_breakout": [0.1, 0.2, 0.3]},
       0.2: {"atari_pong": [1.2, 1.4, 1.6], "atari_breakout": [1.1, 1.2, 0.2]}}


@pytest.fixture
def atari_sweep(tmp_path) -> Path:
    for lr, tasks in HNS.items():
        for env, values in tasks.items():
            base = PONG if env == "atari_pong" else BREAKOUT
            for seed, hns in enumerate(values, start=1):
                _experiment(tmp_path / "sweep", f"{env}_lr={lr}_seed={seed}", env, seed, lr, _raw(base, hns))
    return tmp_path


def _rows(out: str) -> dict[str, list[tuple[float, float, float]]]:
    """Markdown rows of the aggregate table: method -> [(value, low, high) per statistic]."""
    rows = {}
    for line in out.split("probability of improvement")[0].splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) > 3 and cells[0].startswith("sweep") and "[" in cells[-1]:
            rows[cells[0]] = [tuple(float(v) for v in re.findall(r"-?[\d.]+(?:e-?\d+)?", c)) for c in cells[3:]]
    return rows


def test_eval_aggregate_matches_hand_computed_values(atari_sweep, capsys):
    assert sfx_tb_main(["table", "sweep", "--dir", str(atari_sweep), "--eval", "--reps", "300"]) == 0
    out = capsys.readouterr().out
    assert "human-normalised (1 = human) evaluation return: 2 method(s), 2 task(s), 12 run(s)" in out
    rows = _rows(out)
    low_lr, high_lr = rows["sweep [learning_rate=0.1]"], rows["sweep [learning_rate=0.2]"]
    # lr 0.1: sorted 0.1 0.2 0.2 0.3 0.4 0.6; 6 // 4 = 1 dropped at each end -> (0.2 + 0.2 + 0.3 + 0.4) / 4
    iqm, mean, median, gap = low_lr
    assert iqm[0] == pytest.approx(0.275, abs=1e-3)
    assert mean[0] == pytest.approx(0.3, abs=1e-3)
    assert median[0] == pytest.approx(0.3, abs=1e-3)  # task means 0.4 and 0.2
    assert gap[0] == pytest.approx(0.7, abs=1e-3)     # 1 - mean(min(x, 1))
    # lr 0.2: sorted 0.2 1.1 1.2 1.2 1.4 1.6 -> IQM (1.1 + 1.2 + 1.2 + 1.4) / 4; gap: only 0.2 falls short, by 0.8
    assert high_lr[0][0] == pytest.approx(1.225, abs=1e-3)
    assert high_lr[3][0] == pytest.approx(0.8 / 6, abs=1e-3)
    for value, low, high in low_lr + high_lr:
        assert low <= value + 1e-9 and value <= high + 1e-9
    # P(lr 0.1 > lr 0.2): pong never (0); breakout: only 0.3 > 0.2 and 0.2 == 0.2 (half) -> (1 + 0.5) / 9 per task
    p = re.search(r"\| sweep \[learning_rate=0.1\] \| sweep \[learning_rate=0.2\] \| 2 \| ([\d.]+) \[", out)
    assert p and float(p.group(1)) == pytest.approx((0 + 1.5 / 9) / 2, abs=1e-3)


def test_a_normalisation_file_and_raw_scores(atari_sweep, capsys):
    ranges = atari_sweep / "ranges.json"
    ranges.write_text(json.dumps({"atari_pong": list(PONG), "atari_breakout": list(BREAKOUT)}))
    # sfx_tb alone (no suite scores passed in): the file gives the same normalisation
    assert cli_main(["table", "sweep", "--dir", str(atari_sweep), "--eval", "--reps", "50", "--normalize",
                     str(ranges)]) == 0
    out = capsys.readouterr().out
    assert _rows(out)["sweep [learning_rate=0.1]"][0][0] == pytest.approx(0.275, abs=1e-3)
    assert cli_main(["table", "sweep", "--dir", str(atari_sweep), "--eval", "--reps", "50", "--method_by",
                     "learning_rate"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("evaluation return: 2 method(s)") and "optimality gap" not in out
    raw = sorted(_raw(PONG, h) for h in HNS[0.1]["atari_pong"]) + sorted(_raw(BREAKOUT, h) for h in HNS[0.1]["atari_breakout"])
    row = next(line for line in out.splitlines() if line.startswith("| learning_rate=0.1 |"))
    assert float(row.split("|")[5].split("[")[0]) == pytest.approx(np.mean(raw), rel=1e-2)  # the mean column


def test_bad_input_is_one_line(atari_sweep, capsys, tmp_path):
    d = str(atari_sweep)
    assert cli_main(["table", "sweep", "--dir", d, "--eval", "--normalize", "bogus"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sfx.tb: error: --normalize 'bogus': not a readable JSON file")
    assert "allowed: auto, none, or a JSON file" in err[0]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"atari_pong": [1, 1]}))
    assert cli_main(["table", "sweep", "--dir", d, "--eval", "--normalize", str(bad)]) == 2
    assert "task 'atari_pong' maps to [1, 1]; allowed: [low, high]" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli_main(["table", "sweep", "--dir", d, "--eval", "--confidence", "1.5"])
    assert e.value.code == 2 and "'1.5' is not allowed: use a level in (0, 1)" in capsys.readouterr().err
    assert cli_main(["table", "sweep", "--dir", d, "--eval", "--method_by", "no_such_key"]) == 2
    assert "--method_by no_such_key: not a key of" in capsys.readouterr().err
    for f in (atari_sweep / "sweep").glob("*/eval_results_p0.json"):
        f.unlink()
    assert cli_main(["table", "sweep", "--dir", d, "--eval"]) == 2
    err = capsys.readouterr().err
    assert "has an evaluation results file" in err and "python -m sfx.tb evaluate" in err


def test_uneven_seeds_use_as_many_runs_per_task_with_a_note(tmp_path, capsys):
    for seed, value in [(1, 1.0), (2, 2.0), (3, 9.0)]:
        _experiment(tmp_path / "sweep", f"gym_a_seed={seed}", "gym_A", seed, 0.1, value)
    for seed, value in [(1, 3.0), (2, 4.0)]:
        _experiment(tmp_path / "sweep", f"gym_b_seed={seed}", "gym_B", seed, 0.1, value)
    assert sfx_tb_main(["table", "sweep", "--dir", str(tmp_path), "--eval", "--reps", "20"]) == 0
    captured = capsys.readouterr()
    assert "no suite scores for task(s) gym_A, gym_B" in captured.err
    assert "tasks have 2 to 3 runs; 2 per task are used (the lowest seeds)" in captured.err
    row = _rows(captured.out)["sweep"]
    assert row[1][0] == pytest.approx(2.5)  # mean of 1, 2, 3, 4: seed 3's 9.0 left out


def test_methods_are_the_explicit_flags_but_env_and_seed(atari_sweep):
    experiments, _ = select_experiments(["sweep"], atari_sweep)
    methods = assign_methods(experiments)
    assert set(methods.values()) == {"sweep [learning_rate=0.1]", "sweep [learning_rate=0.2]"}
    scores = scores_from_results(experiments)
    tasks, x, notes = score_matrix(scores, "sweep [learning_rate=0.2]")
    assert tasks == ["atari_breakout", "atari_pong"] and x.shape == (3, 2) and not notes
    pd_scores, normalised, missing = normalize(scores, {"atari_pong": PONG, "atari_breakout": BREAKOUT})
    assert normalised and not missing
    _, x, _ = score_matrix(pd_scores, "sweep [learning_rate=0.2]")
    np.testing.assert_allclose(x, [[1.1, 1.2], [1.2, 1.4], [0.2, 1.6]], atol=1e-9)


def test_median_of_task_means_and_the_profile_band_by_hand():
    x = np.array([[1.0, 10.0, 0.0], [3.0, 20.0, 2.0]])  # task means 2, 15, 1 -> median 2
    assert stats.median_of_task_means(x) == 2.0
    taus = [0.5, 2.5]
    # one run per task: every bootstrap replicate is the data itself, the band collapses onto the profile
    curve, low, high = stats.performance_profile_band(x[:1], taus, reps=20)
    np.testing.assert_allclose(curve, [2 / 3, 1 / 3])
    np.testing.assert_allclose(low, curve) and np.testing.assert_allclose(high, curve)
    curve, low, high = stats.performance_profile_band(x, taus, reps=200)
    np.testing.assert_allclose(curve, [(1 + 1 + 0.5) / 3, (0.5 + 1 + 0) / 3])  # per task, then averaged
    assert np.all(low <= curve + 1e-12) and np.all(curve <= high + 1e-12)


def test_profile_plot(atari_sweep, tmp_path, capsys):
    out = tmp_path / "profiles.svg"
    assert sfx_tb_main(["plot", "sweep", "--dir", str(atari_sweep), "--eval", "--profile", "--reps", "50",
                        "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    text = out.read_text()
    assert "sweep [learning_rate=0.1]" in text and "human-normalised" in text


def test_training_scalars_aggregate_like_the_summary_table(train_root, capsys):
    """Real event files (conftest's CartPole sweep, 2 learning rates x 2 seeds): 1 task, 2 runs per method; the
    IQM of 2 runs is their mean, so it equals the summary table's mean over seeds."""
    from sfx_tb.scalars import load_scalars
    from sfx_tb.table import summary_table

    assert sfx_tb_main(["table", "sweep", "--dir", str(train_root), "--aggregate", "--reps", "100"]) == 0
    captured = capsys.readouterr()
    assert "no suite scores for task(s) gym_CartPole-v1" in captured.err
    rows = _rows(captured.out)
    assert set(rows) == {"sweep [learning_rate=0.0001]", "sweep [learning_rate=0.001]"}
    summary = summary_table(load_scalars("sweep", train_root), "reward")
    for lr in ("0.0001", "0.001"):
        mean = summary.loc[summary["group"].str.contains(f"lea={lr}_|lea={lr}$|learning_rate={lr}", regex=True),
                           "reward_mean"]
        assert len(mean) == 1
        assert rows[f"sweep [learning_rate={lr}]"][0][0] == pytest.approx(float(mean.iloc[0]), rel=2e-3)


def test_evaluate_runs_sfx_enjoy_per_experiment_then_the_aggregate(train_root, tmp_path, capsys):
    root = tmp_path / "td"
    shutil.copytree(train_root, root)
    assert sfx_tb_main(["evaluate", "sweep", "--dir", str(root), "--max_num_episodes", "2", "--jobs", "2",
                        "--reps", "50"]) == 0
    out = capsys.readouterr().out
    assert out.count(" policy 0: return ") == 4
    for folder in (root / "sweep").iterdir():
        doc = json.loads((folder / "eval_results_p0.json").read_text())
        assert doc["episodes"] == 2 and len(doc["rewards"]) == 2 and doc["env"] == "gym_CartPole-v1"
        assert Path(doc["checkpoint"]).is_file() and doc["env_steps"] > 0
    assert "evaluation return: 2 method(s), 1 task(s), 4 run(s)" in out
    assert "| sweep [learning_rate=0.001] | 1 | 2 |" in out


def test_multi_task_trainings_score_each_task(tmp_path, capsys):
    """Runs of --env=multitask log task/<name>/reward: each task is a task of the aggregate, normalised by its own
    baselines (event files written here, as in test_per_task_table)."""
    from tests.tb.test_per_task_table import write_events

    hns = {1: {"atari_pong": 0.5, "atari_breakout": 1.5}, 2: {"atari_pong": 0.25, "atari_breakout": 1.0}}
    for seed, tasks in hns.items():
        folder = tmp_path / "mt" / f"multi_seed={seed}"
        (folder / ".summary").mkdir(parents=True)
        (folder / "cfg.json").write_text(json.dumps({"env": "multitask", "seed": seed, "explicit_args": ["env", "seed"]}))
        points = [("reward", 100, 0.0)]
        for task, h in tasks.items():
            base = PONG if task == "atari_pong" else BREAKOUT
            points += [(f"task/{task}/reward", 100, base[0]), (f"task/{task}/reward", 200, _raw(base, h))]
        write_events(folder / ".summary" / "0", points)
    assert sfx_tb_main(["table", "mt", "--dir", str(tmp_path), "--aggregate", "--last_frac", "0.5",
                        "--reps", "50"]) == 0
    out = capsys.readouterr().out
    assert "2 task(s), 4 run(s)" in out
    row = next(line for line in out.splitlines() if line.startswith("| mt |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # scores 0.25 0.5 1.0 1.5 -> IQM (0.5 + 1.0) / 2 (float32 event values: 3 digits); mean 0.8125
    assert float(cells[3].split()[0]) == pytest.approx(0.75, abs=2e-3)
    assert float(cells[4].split()[0]) == pytest.approx(0.8125, abs=2e-3)
    # optimality gap: (0.5 + 0.75 + 0 + 0) / 4
    assert float(cells[6].split()[0]) == pytest.approx(0.3125, abs=2e-3)
