"""The TensorBoard mode: the link folder, port choice, and a real server started by ``python -m sfx.tb``."""

import json
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from sfx_tb import load_scalars
from sfx_tb.cli import main
from sfx_tb.serve import LinkFarm, choose_port

REPO = Path(__file__).resolve().parents[2]
COPY_IGNORE = shutil.ignore_patterns("checkpoint_p*")


def make_exp(root, name):
    (root / name / ".summary" / "0").mkdir(parents=True)
    (root / name / "cfg.json").write_text(json.dumps({"seed": 1}))


def test_link_farm_follows_the_matches(tmp_path):
    root, links = tmp_path / "td", tmp_path / "links"
    links.mkdir()
    make_exp(root, "run/00_a_see=1")
    make_exp(root, "run/01_b_see=1")
    (root / "run" / "02_a_see=2").mkdir(parents=True)  # starting: no .summary yet
    (root / "run" / "02_a_see=2" / "cfg.json").write_text("{}")
    farm = LinkFarm(["*_a_*"], root, links)
    assert farm.refresh() == (["run/00_a_see=1"], [])
    assert (links / "run" / "00_a_see=1").resolve() == (root / "run" / "00_a_see=1" / ".summary").resolve()
    assert farm.refresh() == ([], [])
    (root / "run" / "02_a_see=2" / ".summary").mkdir()
    make_exp(root, "run/03_b_see=2")  # does not match
    assert farm.refresh() == (["run/02_a_see=2"], [])
    shutil.rmtree(root / "run" / "00_a_see=1")
    assert farm.refresh() == ([], ["run/00_a_see=1"])
    assert farm.names() == ["run/02_a_see=2"]
    shutil.rmtree(links)  # removing the links leaves the experiments alone
    assert (root / "run" / "02_a_see=2" / ".summary").is_dir()


def test_a_busy_port_is_replaced_by_a_free_one():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        s.listen()
        busy = s.getsockname()[1]
        chosen = choose_port("localhost", busy)
        assert chosen != busy and (chosen == 0 or chosen > busy)
    assert choose_port("localhost", 0) == 0


def test_bad_serve_flags_are_one_error_line(tmp_path, capsys):
    assert main(["*", "--dir", str(tmp_path / "nope")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert main(["*", "--dir", str(tmp_path), "--port", "70000"]) == 2
    assert "--port 70000 is not allowed" in capsys.readouterr().err
    assert main(["*", "--dir", str(tmp_path), "--refresh_every", "0"]) == 2
    assert "--refresh_every 0 is not allowed" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["plot", "*", "--", "--purge_orphaned_data"])
    assert info.value.code == 2 and "go to TensorBoard (serve) or sfx.enjoy (evaluate) only" in capsys.readouterr().err


def test_list_shows_names_seeds_and_groups(train_root, capsys):
    assert main(["*see=2*", "--dir", str(train_root), "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["experiment", "seed", "group"]
    assert [line.split() for line in lines[1:]] == [
        ["sweep/02_cartpole_see=2_lea=0.0001", "2", "sweep/cartpole_lea=0.0001"],
        ["sweep/03_cartpole_see=2_lea=0.001", "2", "sweep/cartpole_lea=0.001"]]


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def wait_for(condition, timeout_sec, what):
    deadline = time.monotonic() + timeout_sec
    last = None
    while time.monotonic() < deadline:
        try:
            last = condition()
            if last:
                return last
        except OSError as e:  # the server not answering yet
            last = e
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def test_tensorboard_serves_the_matching_runs_and_picks_up_new_ones(train_root, tmp_path, child_env):
    root = tmp_path / "td"
    shutil.copytree(train_root, root, ignore=COPY_IGNORE)
    proc = subprocess.Popen([sys.executable, "-m", "sfx.tb", "*lea=0.001*", "--dir", str(root), "--port", "0",
                             "--refresh_every", "1"], cwd=REPO, env=child_env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)
    reader.start()
    seen: list[str] = []

    def read_until(regex, timeout_sec):
        deadline = time.monotonic() + timeout_sec
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                assert proc.poll() is None, "sfx.tb exited:\n" + "".join(seen)
                continue
            seen.append(line)
            m = re.search(regex, line)
            if m:
                return m
        raise AssertionError(f"no line matching {regex!r} in:\n" + "".join(seen))

    try:
        m = read_until(r"TensorBoard at (http://localhost:(\d+)/) .*links in (\S+);", 60)
        url, port, link_dir = m.group(1), int(m.group(2)), Path(m.group(3))
        assert port > 0
        expected = {"sweep/01_cartpole_see=1_lea=0.001/0", "sweep/03_cartpole_see=2_lea=0.001/0"}
        runs = wait_for(lambda: set(get_json(url + "data/runs")) == expected and expected, 30, "the runs")
        assert runs == expected
        tags = get_json(url + "data/plugin/scalars/tags")
        assert set(tags) == expected and all({"reward", "fps", "loss/value"} <= set(tags[r]) for r in expected)
        run = "sweep/01_cartpole_see=1_lea=0.001/0"
        query = urllib.parse.urlencode({"run": run, "tag": "reward"})
        served = get_json(url + "data/plugin/scalars/scalars?" + query)
        df = load_scalars("sweep/01_*", dir=root, metrics="reward")
        assert [(p[1], pytest.approx(p[2])) for p in served] == list(zip(df["step"], df["value"]))

        # a new experiment of the sweep that matches appears after a refresh; one that does not stays away
        shutil.copytree(root / "sweep" / "03_cartpole_see=2_lea=0.001", root / "sweep" / "04_cartpole_see=3_lea=0.001")
        shutil.copytree(root / "sweep" / "02_cartpole_see=2_lea=0.0001", root / "sweep" / "05_cartpole_see=3_lea=0.0001")
        read_until(r"^\+ sweep/04_cartpole_see=3_lea=0.001$", 20)
        new = "sweep/04_cartpole_see=3_lea=0.001/0"
        runs = wait_for(lambda: new in get_json(url + "data/runs") and set(get_json(url + "data/runs")), 30,
                        "the new run")
        assert runs == expected | {new}
        assert link_dir.is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)  # what a process manager sends; Ctrl+C takes the same path
        try:
            rc = proc.wait(timeout=60)  # generous: a loaded 2-core machine exits TensorBoard slowly
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        finally:
            reader.join(timeout=5)
            proc.stdout.close()
    assert rc == 0, "".join(seen)
    assert not link_dir.exists()
    assert (root / "sweep" / "04_cartpole_see=3_lea=0.001" / ".summary" / "0").is_dir()
