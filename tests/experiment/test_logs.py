"""Logging to stderr and the shared sf_log.txt."""

import logging
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sfx.registries import default_cfg
from sfx.experiment import log_path, remove_logging, setup_logging

LINE = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\]\[(\w+)\] (.*)$")


@pytest.fixture
def clean_root():
    root = logging.getLogger()
    level = root.level
    yield
    remove_logging()
    root.setLevel(level)


def test_lines_go_to_file_and_stderr(tmp_path, capsys, clean_root):
    cfg = default_cfg(train_dir=tmp_path, experiment="exp")
    (tmp_path / "exp").mkdir()
    path = setup_logging(cfg, "learner_0")
    assert path == log_path(cfg) and path.is_file()
    logging.getLogger("sfx.test").info("hello %d", 5)
    logging.getLogger("sfx.test").warning("careful")
    file_lines = path.read_text().splitlines()
    assert [LINE.match(x).groups() for x in file_lines] == [("learner_0", "hello 5"), ("learner_0", "WARNING: careful")]
    assert capsys.readouterr().err.splitlines() == file_lines


def test_a_cfg_s_experiment_folder_is_left_to_its_run_and_early_lines_wait_for_it(tmp_path, capsys, clean_root):
    # a start refused by its checks (which run after logging is set up) must leave no folder holding only
    # sf_log.txt; once the run makes the folder, the lines from before are written first
    cfg = default_cfg(train_dir=tmp_path, experiment="exp")
    path = setup_logging(cfg, "coordinator")
    logging.getLogger("sfx.test").info("before the checks")
    assert not (tmp_path / "exp").exists()
    (tmp_path / "exp").mkdir()
    logging.getLogger("sfx.test").info("after")
    assert [LINE.match(x).groups()[1] for x in path.read_text().splitlines()] == ["before the checks", "after"]
    assert len(capsys.readouterr().err.splitlines()) == 2


def test_idempotent_and_appending(tmp_path, capsys, clean_root):
    path = tmp_path / "exp" / "sf_log.txt"
    setup_logging(path, "coordinator")
    setup_logging(path, "coordinator")
    logging.getLogger("x").info("once")
    setup_logging(str(path), "policy_worker_0")  # e.g. another component in this process
    logging.getLogger("x").info("twice")
    lines = [LINE.match(x).groups() for x in path.read_text().splitlines()]
    assert lines == [("coordinator", "once"), ("policy_worker_0", "twice")]
    assert len(capsys.readouterr().err.splitlines()) == 2


def test_exceptions_are_logged_with_traceback(tmp_path, clean_root):
    path = setup_logging(tmp_path / "log.txt", "worker")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("x").exception("it failed")
    text = path.read_text()
    assert "ERROR: it failed" in text and "Traceback" in text and "RuntimeError: boom" in text


def test_stderr_only(capsys, clean_root):
    assert setup_logging(None, "tool") is None
    logging.getLogger("x").info("hi")
    assert capsys.readouterr().err.endswith("[tool] hi\n")


def test_many_processes_append_whole_lines(tmp_path):
    path = tmp_path / "sf_log.txt"
    code = textwrap.dedent(f"""
        import logging, sys
        from sfx.experiment import setup_logging
        setup_logging({str(path)!r}, sys.argv[1])
        for i in range(300):
            logging.getLogger('w').info('message %d %s', i, 'x' * 200)
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code, f"worker_{k}"], stderr=subprocess.DEVNULL,
                              cwd=Path(__file__).resolve().parents[2])
             for k in range(3)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    lines = path.read_text().splitlines()
    assert len(lines) == 900
    counts = {}
    for line in lines:
        name, message = LINE.match(line).groups()
        assert message.endswith("x" * 200)
        counts[name] = counts.get(name, 0) + 1
    assert counts == {"worker_0": 300, "worker_1": 300, "worker_2": 300}
