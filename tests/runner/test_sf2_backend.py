"""Sample Factory 2's launcher spells --runner as --backend: the same choices, the same effect."""

import pytest

from sfx_runner.cli import build_parser, main
from sfx_runner.errors import RunnerError


def test_backend_is_sf2s_name_of_runner(tmp_path, capsys):
    assert build_parser("slurm").parse_args(["--run=runs.quickstart", "--backend=slurm"]).runner == "slurm"
    assert main(["--run=runs.quickstart", "--backend=processes", "--dry_run", f"--train_dir={tmp_path}"]) == 0
    assert "python -m sfx.train" in capsys.readouterr().out
    with pytest.raises(RunnerError, match="--backend: invalid choice: 'kubernetes'"):
        build_parser("processes").parse_args(["--run=runs.quickstart", "--backend=kubernetes"])
