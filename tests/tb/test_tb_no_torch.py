"""sfx_tb runs where torch is not installed: neither importing it nor any of its modes loads torch."""

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_sfx_tb_loads_no_torch(train_root, tmp_path, child_env):
    code = textwrap.dedent(f"""
        import contextlib, io, sys
        import sfx_tb, sfx_tb.cli, sfx_tb.serve, sfx.tb
        assert "torch" not in sys.modules
        from sfx_tb.cli import main
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["*", "--dir", {str(train_root)!r}, "--list"]) == 0
            assert main(["table", "*", "--dir", {str(train_root)!r}]) == 0
            assert main(["plot", "*", "--dir", {str(train_root)!r}, "--out", {str(tmp_path / "c.png")!r}]) == 0
            # the aggregates through sfx.tb's entry point, which reads sfx.envs.task_scores for normalisation
            assert sfx.tb.main(["table", "*", "--dir", {str(train_root)!r}, "--aggregate", "--reps", "10"]) == 0
            assert sfx.tb.main(["plot", "*", "--dir", {str(train_root)!r}, "--profile", "--reps", "10",
                                "--out", {str(tmp_path / "p.png")!r}]) == 0
        import tensorboard.program  # what the serve mode starts
        heavy = sorted(m for m in ("torch", "tensorflow", "sfx.engine", "sfx.train") if m in sys.modules)
        print("heavy:", heavy, "pandas" in sys.modules, "matplotlib" in sys.modules)
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=child_env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "heavy: [] True True", proc.stdout + proc.stderr
    assert (tmp_path / "c.png").stat().st_size > 0
