"""sfx.tb's answers to a newcomer's first tries (issue 57): a trainer flag, a long title, a short run."""

import numpy as np
import pandas as pd
import pytest

from sfx_tb.cli import main
from sfx_tb.curves import plot_curves


def _scalars(points_per_run: int) -> pd.DataFrame:
    """A table as load_scalars returns it: two seeds of one group, ``points_per_run`` rewards each."""
    rows = []
    for seed in (1, 2):
        for i in range(points_per_run):
            rows.append({"experiment": f"run/s{seed}", "group": "run", "seed": seed, "policy": 0, "tag": "reward",
                         "step": 1000 * (i + 1), "wall_time": 100.0 + i, "value": float(seed + i)})
    df = pd.DataFrame(rows)
    df["seed"] = df["seed"].astype("Int64")
    return df


def test_the_trainer_s_train_dir_flag_gets_one_line_naming_dir(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--train_dir", "train_dir", "my_run"])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.count("\n") == 1 and "'--train_dir'" in err and "did you mean --dir?" in err, err


def test_a_near_miss_of_a_flag_is_named_in_one_line(capsys):
    with pytest.raises(SystemExit):
        main(["plot", "my_run", "--titel=x"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "did you mean --title" in err and "usage:" not in err, err


@pytest.mark.parametrize("columns", [1, 3])
def test_a_title_wider_than_the_figure_wraps_inside_it(tmp_path, columns):
    df = _scalars(5)
    df = pd.concat([df.assign(tag=t) for t in ["reward", "len", "fps"][:columns]], ignore_index=True)
    title = "APPO on HalfCheetah-v4: mean and spread over five seeds, against Sample Factory and SB3 " * 2
    fig = plot_curves(df, ["reward", "len", "fps"][:columns], title=title, out=tmp_path / "c.png")
    renderer = fig.canvas.get_renderer()
    box = fig._suptitle.get_window_extent(renderer)
    assert box.x0 >= 0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height, (box, fig.bbox)
    assert "\n" in fig._suptitle.get_text()  # wrapped, not shrunk to an unreadable size
    assert fig._suptitle.get_text().replace("\n", " ").split() == title.split()
    # the panels are not pushed out of the figure by the extra lines
    for ax in fig.axes:
        assert ax.get_window_extent(renderer).y1 < box.y0


def test_a_short_title_stays_on_one_line(tmp_path):
    fig = plot_curves(_scalars(5), "reward", title="CartPole", out=tmp_path / "c.png")
    assert fig._suptitle.get_text() == "CartPole"


def test_a_run_shorter_than_its_summary_interval_says_why_it_is_a_dot(tmp_path, monkeypatch, capsys):
    fig = plot_curves(_scalars(1), "reward", out=tmp_path / "c.png")
    notes = [t.get_text().replace("\n", " ") for t in fig.axes[0].texts]
    assert any("summary interval" in n and "--experiment_summaries_interval" in n for n in notes), notes
    assert not plot_curves(_scalars(3), "reward").axes[0].texts  # a curve needs no word

    import sfx_tb.scalars

    monkeypatch.setattr(sfx_tb.scalars, "load_scalars", lambda *a, **k: _scalars(1))
    assert main(["plot", "run", "--out", str(tmp_path / "d.png")]) == 0
    err = capsys.readouterr().err
    assert err.startswith("sfx.tb: note: reward: one point per run") and "--experiment_summaries_interval" in err
    assert np.isfinite(fig.axes[0].lines[0].get_ydata()).all()
