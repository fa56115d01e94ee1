"""The ngc backend: one ``ngc batch run`` per experiment, built from a template.

The experiment's command reaches NGC as the ``--commandline`` string, which NGC runs with a
shell inside the container. It is quoted (:func:`shlex.join`) so that this shell splits it back
into exactly the experiment's argv, whatever spaces, quotes or ``$`` its arguments hold. The
``ngc`` program itself is started with an argument list (no local shell in between).

Paths: ``--train_dir`` must be the path of the train dir inside the container (e.g.
``--train_dir=/results/train_dir`` or a mounted workspace), since it is written into every command.
NGC jobs cannot be watched from here: the backend returns once every job is submitted and records
each NGC job id in the run's state files when it can write them.

Template (``--ngc_job_template=FILE``): the ``ngc`` command line, written as in a shell; it may span
lines (ending in ``\\``) and have ``#`` comment lines. It is split into words first, then these
placeholders are filled in inside each word (so a value with spaces stays one word):

    {name}        the NGC job name: --ngc_name_prefix + the experiment name
    {exp_name}    the experiment name (00_cartpole_see=1)    {run_name}  the run name
    {index}       the experiment's index in the run
    {cmd}         the experiment's command, quoted for the container's shell (with ``env K=V``
                  in front when the experiment sets environment variables)
    {commandline} ``cd {workdir} && {cmd}`` with --ngc_workdir, else ``{cmd}``
    {image} {instance} {workspace} {result} {workdir}   the --ngc_* flags, as given
    {train_dir}   <train_dir>/<run_name>, as the commands carry it

e.g. ``ngc batch run --name {name} --image {image} --instance {instance} --result {result}
--team rl --commandline "cd /workspace/sfx && {cmd}"``. A leading ``ngc`` word stands for
``--ngc_executable``. ``{{`` and ``}}`` are literal braces.

Sample Factory 1.x's templates work as they are: its placeholders ``{{ name }}`` and
``{{ experiment_cmd }}`` (double braces, spaces inside) mean ``{name}`` and ``{cmd}``.
``--ngc_print_only`` (SF1's flag) is ``--dry_run``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import string
import subprocess
from pathlib import Path

from sfx_runner.backends.base import Backend, parse_bool
from sfx_runner.errors import RunnerError
from sfx_runner.run_description import ExperimentSpec, RunDescription
from sfx_runner.state import write_state

PLACEHOLDERS = ("name", "exp_name", "run_name", "index", "cmd", "commandline", "image", "instance", "workspace",
                "result", "workdir", "train_dir")
# Sample Factory 1.x's template placeholders ({{ name }}, {{ experiment_cmd }}) -> sfx's
SF1_PLACEHOLDER_RE = re.compile(r"\{\{ +(name|experiment_cmd) +\}\}")
SF1_PLACEHOLDERS = {"name": "{name}", "experiment_cmd": "{cmd}"}
SUBMIT_TIMEOUT_SEC = 300


def remote_command(spec: ExperimentSpec) -> str:
    """The experiment's command as one string that a POSIX shell splits back into exactly
    ``spec.argv`` (behind ``env K=V ...`` when the experiment sets environment variables)."""
    env = [f"{k}={v}" for k, v in spec.env_vars.items()]
    return shlex.join(["env", *env, *spec.argv] if env else spec.argv)


def read_template(path: str | os.PathLike) -> list[str]:
    """The words of a template file (see the module docstring), placeholders not filled in yet
    (Sample Factory 1.x's ``{{ name }}`` / ``{{ experiment_cmd }}`` already turned into ``{name}`` / ``{cmd}``).

    Raises:
        RunnerError: a missing file, unbalanced quotes, an unknown placeholder.
    """
    file = Path(path).expanduser()
    try:
        text = file.read_text()
    except OSError as e:
        raise RunnerError(f"--ngc_job_template={os.fspath(path)!r} cannot be read: {e.strerror}") from None
    text = re.sub(r"\\\r?\n", " ", text)  # line continuations
    text = SF1_PLACEHOLDER_RE.sub(lambda m: SF1_PLACEHOLDERS[m.group(1)], text)
    try:
        words = shlex.split(text, comments=True)
    except ValueError as e:
        raise RunnerError(f"--ngc_job_template={os.fspath(path)!r}: cannot split it into words: {e}") from None
    if not words:
        raise RunnerError(f"--ngc_job_template={os.fspath(path)!r} is empty")
    for word in words:
        try:
            fields = [f for _, f, _, _ in string.Formatter().parse(word) if f is not None]
        except ValueError as e:
            raise RunnerError(f"--ngc_job_template: {word!r}: {e} (write {{{{ and }}}} for literal braces)") from None
        for f in fields:
            if f not in PLACEHOLDERS:
                raise RunnerError(f"--ngc_job_template: unknown placeholder {{{f}}} in {word!r}; allowed: "
                                  + ", ".join(f"{{{p}}}" for p in PLACEHOLDERS))
    return words


def parse_job_id(output: str) -> str | None:
    """The NGC job id in ``ngc batch run``'s output (its table's ``Id: 1234567`` line, or JSON)."""
    try:
        doc = json.loads(output)
        if isinstance(doc, dict) and doc.get("id") is not None:
            return str(doc["id"])
    except ValueError:
        pass
    match = re.search(r"^\s*(?:Job\s+)?Id:\s*(\d+)\s*$", output, re.MULTILINE | re.IGNORECASE)
    return match.group(1) if match else None


class NgcBackend(Backend):
    """Submits each experiment as one NGC batch job; see the module docstring."""

    name = "ngc"

    @classmethod
    def add_args(cls, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("ngc runner (--runner=ngc)")
        g.add_argument("--ngc_job_template", default=None,
                       help="file with the 'ngc batch run ...' command line and {placeholders} (see "
                            "sfx_runner/backends/ngc.py); none = batch run --name {name} --image {image} "
                            "--instance {instance} --result {result} [--workspace {workspace}] "
                            "--commandline {commandline}")
        g.add_argument("--ngc_image", default=None, help="container image, e.g. nvcr.io/myorg/sfx:latest")
        g.add_argument("--ngc_instance", default=None, help="instance type, e.g. dgx1v.16g.1.norm")
        g.add_argument("--ngc_name_prefix", default=None,
                       help="put before each experiment name to make the NGC job name; none = '<run_name>.'")
        g.add_argument("--ngc_workspace", default=None,
                       help="workspace to mount, as ngc takes it: <workspace>:<mount point>[:RW|RO]")
        g.add_argument("--ngc_result", default="/results", help="result folder inside the container")
        g.add_argument("--ngc_workdir", default=None,
                       help="folder inside the container to run the commands in (e.g. the code's checkout)")
        g.add_argument("--ngc_executable", default="ngc", help="the NGC CLI program (a name on PATH or a path)")
        g.add_argument("--ngc_print_only", type=parse_bool, nargs="?", const=True, default=False,
                       help="Sample Factory 1.x's flag: print each 'ngc batch run' command, submit nothing: --dry_run")

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.template = read_template(args.ngc_job_template) if args.ngc_job_template else None
        if self.template is None:
            missing = [f"--ngc_{f}" for f in ("image", "instance") if not getattr(args, f"ngc_{f}")]
            if missing:
                raise RunnerError(f"the ngc runner needs {' and '.join(missing)} (or a --ngc_job_template "
                                  f"that names the image and the instance itself)")
        if not args.ngc_executable:
            raise RunnerError("--ngc_executable must name the NGC CLI program")

    def job_argv(self, spec: ExperimentSpec, run: RunDescription, executable: str | None = None) -> list[str]:
        """The full ``ngc ...`` argument list that submits ``spec``."""
        a = self.args
        prefix = f"{run.run_name}." if a.ngc_name_prefix is None else a.ngc_name_prefix
        cmd = remote_command(spec)
        values = {
            "name": prefix + spec.name, "exp_name": spec.name, "run_name": run.run_name, "index": str(spec.index),
            "cmd": cmd, "commandline": f"cd {shlex.quote(a.ngc_workdir)} && {cmd}" if a.ngc_workdir else cmd,
            "image": a.ngc_image or "", "instance": a.ngc_instance or "", "workspace": a.ngc_workspace or "",
            "result": a.ngc_result or "", "workdir": a.ngc_workdir or "", "train_dir": str(spec.train_dir),
        }
        exe = executable or a.ngc_executable
        if self.template is None:
            words = ["batch", "run", "--name", values["name"], "--image", values["image"],
                     "--instance", values["instance"], "--result", values["result"]]
            if a.ngc_workspace:
                words += ["--workspace", a.ngc_workspace]
            return [exe, *words, "--commandline", values["commandline"]]
        words = [w.format_map(values) for w in self.template]
        if words[0] == "ngc":
            words = words[1:]
        return [exe, *words]

    def dry_run(self, specs: list[ExperimentSpec], run: RunDescription) -> None:
        print(f"[runner] ngc dry run: run {run.run_name!r}, {len(specs)} jobs (nothing submitted)")
        for spec in specs:
            print(f"  {spec.name}: {shlex.join(self.job_argv(spec, run))}")

    def launch(self, specs: list[ExperimentSpec], run: RunDescription) -> int:
        exe = self.args.ngc_executable
        found = shutil.which(exe)
        if found is None:
            raise RunnerError(f"--ngc_executable={exe!r} not found (not on PATH or not executable): install the "
                              f"NGC CLI (https://ngc.nvidia.com/setup/installers/cli) or pass its path")
        failures = 0
        state_warning = False
        for spec in specs:
            argv = self.job_argv(spec, run, executable=found)
            try:
                proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                      timeout=SUBMIT_TIMEOUT_SEC)
                rc, output = proc.returncode, proc.stdout + proc.stderr
            except subprocess.TimeoutExpired:
                rc, output = None, f"no answer within {SUBMIT_TIMEOUT_SEC} s"
            job_id = parse_job_id(output) if rc == 0 else None
            if rc == 0:
                print(f"[runner] {spec.name}: submitted to NGC" + (f" as job {job_id}" if job_id else ""))
            else:
                failures += 1
                print(f"[runner] {spec.name}: FAILED to submit (ngc exit code {rc}); its output:")
                for line in output.strip().splitlines()[-10:]:
                    print(f"    {line}")
            try:
                write_state(spec, state="queued" if rc == 0 else "failed", backend="ngc", job_id=job_id, pid=None,
                            returncode=None if rc == 0 else rc)
            except OSError as e:
                # --train_dir names a folder inside the container, which may not exist here
                if not state_warning:
                    print(f"[runner] note: cannot record the run's state under {spec.train_dir} here ({e.strerror}); "
                          f"--status will not know these jobs")
                    state_warning = True
        print(f"[runner] ngc: {len(specs) - failures}/{len(specs)} jobs submitted"
              + (f", {failures} failed" if failures else ""))
        return 1 if failures else 0
