"""The README stays true: its flags table is the parser's, its main-job command parses."""

import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import flags_table  # noqa: E402


def test_readme_flags_table_matches_the_parser():
    text = (ROOT / "README.md").read_text()
    assert flags_table.readme_with_table(text) == text, "run: python scripts/flags_table.py --write"


def test_main_job_command_is_valid(tmp_path):
    from sfx.cfg import parse_args

    script = (ROOT / "run_main.sh").read_text()
    command = script.split("-m sfx.train", 1)[1].replace("\\\n", " ").split('"$@"')[0]
    cfg = parse_args(shlex.split(command) + [f"--train_dir={tmp_path}"])
    assert cfg.env == "gym_CartPole-v1" and cfg.train_for_env_steps == 500_000
