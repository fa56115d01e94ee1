"""The ngc backend: the exact ``ngc batch run`` argv per experiment, recorded by a stand-in ``ngc``
(tests/runner/fake_ngc) since NGC cannot be reached from here."""

import json
import os
import shlex
import subprocess
import textwrap
from pathlib import Path

import pytest

from sfx_runner.backends.ngc import parse_job_id, remote_command
from sfx_runner.cli import load_run_description, main
from sfx_runner.state import read_state

FAKE_NGC = Path(__file__).resolve().parent / "fake_ngc"
# a shell would see: --note='a b "c" $d `e` \f' (quotes, $, backticks, a backslash)
ODD_CMD = "python -m sfx.train --env=gym_CartPole-v1 --note='a b \"c\" $d `e` \\f'"


@pytest.fixture
def ngc_on_path(tmp_path, monkeypatch):
    """A folder on PATH whose ``ngc`` is the stand-in; returns the file it records calls in."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ngc").symlink_to(FAKE_NGC)
    log = tmp_path / "ngc_calls.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NGC_LOG", str(log))
    monkeypatch.delenv("FAKE_NGC_FAIL", raising=False)
    return log


def write_run(tmp_path: Path) -> Path:
    path = tmp_path / "ngc_run.py"
    path.write_text(textwrap.dedent(f"""
        from sfx_runner import Experiment, ParamGrid, RunDescription
        RUN_DESCRIPTION = RunDescription("ngcrun", [
            Experiment("odd", {ODD_CMD!r}, ParamGrid([("seed", [1, 2])]),
                       env_vars={{"OMP_NUM_THREADS": 1, "NOTE": "x y"}}),
            Experiment("plain", "python3 -m sfx.train --env=doom_basic"),
        ])
    """))
    return path


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def shell_split(commandline: str) -> list[str]:
    """How a real POSIX shell splits ``commandline`` into words (what NGC's container shell does)."""
    out = subprocess.run(["sh", "-c", f"set -- {commandline}; for a in \"$@\"; do printf '%s\\0' \"$a\"; done"],
                         capture_output=True, check=True).stdout
    return out.decode().split("\0")[:-1]


BASE_FLAGS = ["--runner=ngc", "--ngc_image=nvcr.io/acme/sfx:1.0", "--ngc_instance=dgx1v.16g.1.norm"]


def test_default_template_gives_the_exact_argv_per_experiment(tmp_path, ngc_on_path, capsys):
    run_file = write_run(tmp_path)
    train_dir = tmp_path / "td"
    rc = main([f"--run={run_file}", f"--train_dir={train_dir}", *BASE_FLAGS, "--ngc_workspace=ws1:/ws:RW"])
    out = capsys.readouterr().out
    assert rc == 0, out
    specs = load_run_description(str(run_file)).generate_experiments(train_dir)
    recorded = calls(ngc_on_path)
    assert len(recorded) == len(specs) == 3
    for spec, args in zip(specs, recorded, strict=True):
        env = [f"{k}={v}" for k, v in spec.env_vars.items()]
        command = shlex.join(["env", *env, *spec.argv]) if env else shlex.join(spec.argv)
        assert args == ["batch", "run", "--name", f"ngcrun.{spec.name}", "--image", "nvcr.io/acme/sfx:1.0",
                        "--instance", "dgx1v.16g.1.norm", "--result", "/results", "--workspace", "ws1:/ws:RW",
                        "--commandline", command]
        # the container's shell gets the experiment's argv back exactly, odd characters included
        words = shlex.split(args[-1])
        assert words == (["env", *env, *spec.argv] if env else spec.argv)
        assert shell_split(args[-1]) == words
    assert 'a b "c" $d `e` \\f' in [a.split("=", 1)[-1] for a in specs[0].argv]
    assert specs[0].argv[0] == "python" and specs[2].argv[0] == "python3"  # not resolved: the container's python
    # submitted jobs are recorded with the ids ngc printed
    assert [read_state(s)["job_id"] for s in specs] == ["4000001", "4000002", "4000003"]
    assert {read_state(s)["state"] for s in specs} == {"queued"}
    assert {read_state(s)["backend"] for s in specs} == {"ngc"}
    assert "submitted to NGC as job 4000001" in out


def test_template_file_with_placeholders(tmp_path, ngc_on_path, capsys):
    run_file = write_run(tmp_path)
    template = tmp_path / "job.tmpl"
    template.write_text(textwrap.dedent("""\
        # a team's template
        ngc batch run --name "{name}" --image {image} --instance {instance} \\
            --team rl --label run_{run_name} --label idx_{index} --result {result} \\
            --commandline "cd {workdir} && mkdir -p {train_dir} && {cmd}" --total-runtime 72h --lit {{x}}
    """))
    train_dir = tmp_path / "td"
    rc = main([f"--run={run_file}", f"--train_dir={train_dir}", *BASE_FLAGS, f"--ngc_job_template={template}",
               "--ngc_workdir=/workspace/sfx", "--ngc_name_prefix=", "--only=*plain*"])
    assert rc == 0, capsys.readouterr()
    (spec,) = [s for s in load_run_description(str(run_file)).generate_experiments(train_dir) if "plain" in s.name]
    (args,) = calls(ngc_on_path)
    assert args == ["batch", "run", "--name", spec.name, "--image", "nvcr.io/acme/sfx:1.0",
                    "--instance", "dgx1v.16g.1.norm", "--team", "rl", "--label", "run_ngcrun", "--label", "idx_2",
                    "--result", "/results",
                    "--commandline", f"cd /workspace/sfx && mkdir -p {spec.train_dir} && {shlex.join(spec.argv)}",
                    "--total-runtime", "72h", "--lit", "{x}"]
    assert shell_split(args[args.index("--commandline") + 1].rsplit(" && ", 1)[1]) == spec.argv


def test_workdir_with_the_default_template(tmp_path, ngc_on_path):
    run_file = write_run(tmp_path)
    assert main([f"--run={run_file}", f"--train_dir={tmp_path / 'td'}", *BASE_FLAGS,
                 "--ngc_workdir=/workspace/my code", "--only=*plain*"]) == 0
    (args,) = calls(ngc_on_path)
    cd, command = args[-1].split(" && ", 1)
    assert shell_split(cd) == ["cd", "/workspace/my code"]
    assert command.startswith("python3 -m sfx.train")


def test_dry_run_prints_commands_and_submits_nothing(tmp_path, ngc_on_path, capsys):
    run_file = write_run(tmp_path)
    assert main([f"--run={run_file}", f"--train_dir={tmp_path / 'td'}", *BASE_FLAGS, "--dry_run"]) == 0
    out = capsys.readouterr().out
    assert calls(ngc_on_path) == []
    lines = [line for line in out.splitlines() if "batch run" in line]
    assert len(lines) == 3
    # each printed line is a shell command that gives the same argv as a real launch
    argv = shlex.split(lines[0].split(": ", 1)[1])
    assert argv[:3] == ["ngc", "batch", "run"] and argv[-2] == "--commandline"
    assert shlex.split(argv[-1])[:3] == ["env", "OMP_NUM_THREADS=1", "NOTE=x y"]


def test_a_refused_job_is_reported_and_the_others_are_submitted(tmp_path, ngc_on_path, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_NGC_FAIL", "see=2")
    run_file = write_run(tmp_path)
    train_dir = tmp_path / "td"
    rc = main([f"--run={run_file}", f"--train_dir={train_dir}", *BASE_FLAGS])
    out = capsys.readouterr().out
    assert rc == 1
    assert len(calls(ngc_on_path)) == 3
    specs = load_run_description(str(run_file)).generate_experiments(train_dir)
    assert f"{specs[1].name}: FAILED to submit (ngc exit code 3)" in out
    assert "quota exceeded (fake ngc)" in out
    assert [read_state(s)["state"] for s in specs] == ["queued", "failed", "queued"]
    assert read_state(specs[1])["returncode"] == 3


def test_missing_ngc_executable_is_a_clear_error(tmp_path, monkeypatch, capsys):
    run_file = write_run(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert main([f"--run={run_file}", f"--train_dir={tmp_path / 'td'}", *BASE_FLAGS]) == 2
    err = capsys.readouterr().err
    assert "error: --ngc_executable='ngc' not found" in err
    assert main([f"--run={run_file}", f"--train_dir={tmp_path / 'td'}", *BASE_FLAGS,
                 f"--ngc_executable={tmp_path / 'no' / 'ngc'}"]) == 2
    assert "not found" in capsys.readouterr().err
    assert not (tmp_path / "td").exists()  # nothing recorded, nothing submitted


@pytest.mark.parametrize("flags, message", [
    (["--ngc_image=img"], "needs --ngc_instance"),
    ([], "needs --ngc_image and --ngc_instance"),
])
def test_missing_image_or_instance(tmp_path, ngc_on_path, capsys, flags, message):
    rc = main([f"--run={write_run(tmp_path)}", f"--train_dir={tmp_path / 'td'}", "--runner=ngc", *flags])
    assert rc == 2
    assert message in capsys.readouterr().err
    assert calls(ngc_on_path) == []


@pytest.mark.parametrize("text, message", [
    ("ngc batch run --name {nmae} --commandline {cmd}", "unknown placeholder {nmae}"),
    ("ngc batch run --commandline '{cmd}", "cannot split"),
    ("# only a comment\n", "is empty"),
])
def test_bad_templates(tmp_path, ngc_on_path, capsys, text, message):
    template = tmp_path / "bad.tmpl"
    template.write_text(text)
    rc = main([f"--run={write_run(tmp_path)}", f"--train_dir={tmp_path / 'td'}", "--runner=ngc",
               f"--ngc_job_template={template}"])
    assert rc == 2
    assert message in capsys.readouterr().err
    assert calls(ngc_on_path) == []


def test_missing_template_file(tmp_path, capsys):
    rc = main([f"--run={write_run(tmp_path)}", f"--train_dir={tmp_path / 'td'}", "--runner=ngc",
               f"--ngc_job_template={tmp_path / 'nope.tmpl'}"])
    assert rc == 2
    assert "nope.tmpl" in capsys.readouterr().err


def test_remote_command_and_job_id_parsing():
    class Spec:
        argv = ["python", "-c", "print('hi there')", "--x=$HOME"]
        env_vars = {}
    assert shell_split(remote_command(Spec)) == Spec.argv
    Spec.env_vars = {"A": "1 2"}
    assert shell_split(remote_command(Spec)) == ["env", "A=1 2", *Spec.argv]
    assert parse_job_id("----\n Job Information\n   Id: 1234567\n   Name: x\n") == "1234567"
    assert parse_job_id('{"id": 42, "jobStatus": {}}') == "42"
    assert parse_job_id("submitted, but no id here") is None
