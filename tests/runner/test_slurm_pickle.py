"""The slurm backend's job as submitit pickles it.

submitit writes the job (an :class:`ExperimentJob` inside a ``DelayedSubmission``) to a pickle when
it submits it and again when it requeues it; the job loads that pickle by the class's module path.
Jobs queued before the backend was split into sections (now in ``sfx_runner.slurm``) named the class
``sfx_runner.backends.slurm.ExperimentJob``: such a pickle must still load, and new pickles must
name the class the same way (so either version of the code can requeue the other's jobs).
"""

import base64
import dataclasses
import pickle
import pickletools
import subprocess
import sys
from pathlib import Path

import pytest

from sfx_runner.backends.slurm import ExperimentJob
from sfx_runner.run_description import ExperimentSpec
from sfx_runner.state import log_path

REPO = Path(__file__).resolve().parents[2]

# cloudpickle.dumps(DelayedSubmission(ExperimentJob(SPEC, ARGV, "/work", 90.0, 30.0)), pickle.HIGHEST_PROTOCOL),
# written by the single-module sfx_runner/backends/slurm.py (submitit 1.5.4, cloudpickle 3.1.2)
OLD_SUBMITIT_PICKLE = base64.b64decode(
    "gAWVeQIAAAAAAACME3N1Ym1pdGl0LmNvcmUudXRpbHOUjBFEZWxheWVkU3VibWlzc2lvbpSTlCmBlH2UKIwIZnVuY3Rpb26UjBlz"
    "ZnhfcnVubmVyLmJhY2tlbmRzLnNsdXJtlIwNRXhwZXJpbWVudEpvYpSTlCmBlH2UKIwEc3BlY5SMGnNmeF9ydW5uZXIucnVuX2Rl"
    "c2NyaXB0aW9ulIwORXhwZXJpbWVudFNwZWOUk5QpgZR9lCiMBWluZGV4lEsAjARuYW1llIwNMDBfb2xkX3BpY2tsZZSMCWJhc2Vf"
    "bmFtZZSMCm9sZF9waWNrbGWUjAZwYXJhbXOUfZSMBHNlZWSUSwFzjARhcmd2lF2UKIwGcHl0aG9ulIwCLW2UjAlzZngudHJhaW6U"
    "jAgtLXNlZWQ9MZRljANjbWSUjBxweXRob24gLW0gc2Z4LnRyYWluIC0tc2VlZD0xlIwIZW52X3ZhcnOUfZSMAUGUjAExlHOMCXRy"
    "YWluX2RpcpSMB3BhdGhsaWKUjAlQb3NpeFBhdGiUk5SMAS+UjAJ0ZJSMA3J1bpSHlFKUjAdleHBfZGlylGgoKGgpaCpoK2gTdJRS"
    "lHViaBldlCiMEC91c3IvYmluL3B5dGhvbjOUaBxoHWgeZYwDY3dklIwFL3dvcmuUjBBzdG9wX3RpbWVvdXRfc2VjlEdAVoAAAAAA"
    "AIwWd2FpdF9hZnRlcl9zaWd0ZXJtX3NlY5RHQD4AAAAAAAB1YowEYXJnc5QpjAZrd2FyZ3OUfZSMB19yZXN1bHSUTowFX2RvbmWU"
    "iYwMX3RpbWVvdXRfbWlulEsAjBJfdGltZW91dF9jb3VudGRvd26USwB1Yi4=")
SPEC = ExperimentSpec(index=0, name="00_old_pickle", base_name="old_pickle", params={"seed": 1},
                      argv=["python", "-m", "sfx.train", "--seed=1"], cmd="python -m sfx.train --seed=1",
                      env_vars={"A": "1"}, train_dir=Path("/td/run"), exp_dir=Path("/td/run/00_old_pickle"))
ARGV = ["/usr/bin/python3", "-m", "sfx.train", "--seed=1"]


def new_job() -> ExperimentJob:
    return ExperimentJob(SPEC, ARGV, "/work", 90.0, 30.0)


def classes_named(data: bytes) -> set[tuple[str, str]]:
    """The (module, name) of every class or function a pickle refers to by reference."""
    names, strings = set(), []
    for op, arg, _ in pickletools.genops(data):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif op.name == "STACK_GLOBAL":
            names.add((strings[-2], strings[-1]))
        elif op.name == "GLOBAL":
            names.add(tuple(arg.split(" ", 1)))
    return names


def assert_same_job(job: ExperimentJob) -> None:
    assert type(job) is ExperimentJob
    assert (job.spec, job.argv, job.cwd, job.stop_timeout_sec, job.wait_after_sigterm_sec) == (SPEC, ARGV, "/work",
                                                                                                90.0, 30.0)
    # the runtime part is made fresh on loading, never carried in the pickle
    assert job._proc is None and job._sigterm_at is None and not job._exited.is_set()


def test_a_job_pickled_by_the_single_module_loads():
    pytest.importorskip("submitit")
    delayed = pickle.loads(OLD_SUBMITIT_PICKLE)
    assert type(delayed).__name__ == "DelayedSubmission"
    assert_same_job(delayed.function)


def test_new_pickles_name_the_job_class_by_its_old_path():
    assert ExperimentJob.__module__ == "sfx_runner.backends.slurm" and ExperimentJob.__qualname__ == "ExperimentJob"
    old_names = classes_named(OLD_SUBMITIT_PICKLE)
    assert ("sfx_runner.backends.slurm", "ExperimentJob") in old_names
    new_names = classes_named(pickle.dumps(new_job(), pickle.HIGHEST_PROTOCOL))
    assert new_names == {n for n in old_names if not n[0].startswith("submitit")}
    assert_same_job(pickle.loads(pickle.dumps(new_job())))


def test_submitit_round_trip(tmp_path):
    """What submitit itself writes (cloudpickle, by reference: not the class's code) and reads back,
    for a submitted job and for the copy that checkpoint() hands over to be requeued."""
    pytest.importorskip("submitit")
    from submitit.core.utils import DelayedSubmission
    path = tmp_path / "submitted.pkl"
    DelayedSubmission(new_job()).dump(path)
    assert classes_named(path.read_bytes()) == classes_named(OLD_SUBMITIT_PICKLE)
    assert_same_job(DelayedSubmission.load(path).function)

    spec = dataclasses.replace(SPEC, train_dir=tmp_path / "run", exp_dir=tmp_path / "run" / SPEC.name)
    log_path(spec).parent.mkdir(parents=True)  # the job's own run made it
    requeued = ExperimentJob(spec, ARGV, "/work", 90.0, 30.0).checkpoint()
    requeued.dump(path)
    assert classes_named(path.read_bytes()) == classes_named(OLD_SUBMITIT_PICKLE)
    job = DelayedSubmission.load(path).function
    assert type(job) is ExperimentJob and (job.spec, job.argv) == (spec, ARGV)


def test_the_old_pickle_loads_in_a_fresh_interpreter(tmp_path):
    """As in the job: a new Python process whose first import is the one the pickle asks for."""
    pytest.importorskip("submitit")
    path = tmp_path / "old.pkl"
    path.write_bytes(OLD_SUBMITIT_PICKLE)
    code = ("import pickle, sys; d = pickle.load(open(sys.argv[1], 'rb')); j = d.function; "
            "print(type(j).__module__, type(j).__qualname__, j.spec.name, j._proc)")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["sfx_runner.backends.slurm", "ExperimentJob", "00_old_pickle", "None"]
