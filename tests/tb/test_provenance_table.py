"""``sfx.tb table --provenance``: what each experiment was, read from the cfg.json sfx.train writes (issue 38);
seeds of one setting still form one group although their provenance differs (time, host)."""

import json

from sfx_tb.cli import main
from sfx_tb.experiments import select_experiments


def _experiment(root, name, seed, provenance):
    folder = root / "run" / name
    folder.mkdir(parents=True)
    cfg = {"env": "gym_CartPole-v1", "seed": seed, "learning_rate": 0.001, "experiment": name}
    if provenance is not None:
        cfg["provenance"] = provenance
    (folder / "cfg.json").write_text(json.dumps(cfg))


def test_provenance_columns_and_groups(tmp_path, capsys):
    prov = {"git": {"commit": "0123456789abcdef0123", "dirty": True}, "cuda": "12.4",
            "packages": {"torch": "2.5.1", "gymnasium": "1.0.0", "vizdoom": "1.3.2"}, "started": "t1", "host": "a"}
    _experiment(tmp_path, "00_cp_see=1", 1, prov)
    _experiment(tmp_path, "01_cp_see=2", 2, {**prov, "git": {"commit": "fedcba9876543210", "dirty": False},
                                             "started": "t2", "host": "b"})
    _experiment(tmp_path, "02_cp_see=3", 3, None)  # trained before provenance was recorded
    experiments, _ = select_experiments("run", tmp_path)
    assert len({e.group for e in experiments}) == 1

    from sfx_tb.provenance import provenance_table

    lines = provenance_table("run", tmp_path).splitlines()
    assert lines[0] == "| experiment | seed | commit | cuda | torch | gymnasium | vizdoom |"
    assert lines[2] == "| run/00_cp_see=1 | 1 | 0123456789ab+dirty | 12.4 | 2.5.1 | 1.0.0 | 1.3.2 |"
    assert lines[3] == "| run/01_cp_see=2 | 2 | fedcba987654 | 12.4 | 2.5.1 | 1.0.0 | 1.3.2 |"
    assert lines[4] == "| run/02_cp_see=3 | 3 | - | - | - | - | - |"


def test_table_command_prints_it(train_root, capsys):
    assert main(["table", "sweep", "--dir", str(train_root), "--provenance"]) == 0
    out = capsys.readouterr().out
    assert "provenance (cfg.json):" in out and "| experiment | seed | commit |" in out
