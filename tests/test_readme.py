"""The README stays short and true: at most 150 lines, the two commands exactly as the scripts run them, the
main job's command parses. (Its other commands are parsed with the docs': tests/test_docs.py. The flag
reference moved to the documentation site, generated from the parser there.)"""

import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 150


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; at most {MAX_LINES}: move details to docs/"


def test_readme_shows_the_two_commands_and_points_to_the_site():
    text = README.read_text()
    assert "```bash\n./run_main.sh\n```" in text
    assert "```bash\n./all_tests.sh\n```" in text
    assert "mkdocs serve" in text and "docs/" in text


def test_main_job_command_is_valid(tmp_path):
    from sfx.registries import parse_args

    script = (ROOT / "run_main.sh").read_text()
    command = script.split("-m sfx.train", 1)[1].replace("\\\n", " ").split('"$@"')[0]
    cfg = parse_args(shlex.split(command) + [f"--train_dir={tmp_path}"])
    assert cfg.env == "gym_CartPole-v1" and cfg.train_for_env_steps == 500_000
