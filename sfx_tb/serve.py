"""A real TensorBoard over the experiments that match wildcard patterns.

TensorBoard is given one logdir: a temporary folder of symbolic links, one per matching experiment,
named like the experiment and pointing at its ``.summary/`` folder. Its runs are therefore
``<experiment>/<policy>``. The links are brought up to date every ``refresh_every`` seconds, and
TensorBoard picks up a new link on its next reload, so a training that starts later (or a folder
copied in) appears without a restart. Both of TensorBoard's loaders (the Rust data server and the
Python one) follow the links.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from sfx_tb.errors import TbError
from sfx_tb.experiments import ExperimentDir, select_experiments

PORT_SEARCH = 100  # ports tried after a busy one before the OS is asked for any free port


class LinkFarm:
    """A folder of symlinks ``<experiment name>`` -> ``<experiment>/.summary``, kept in sync with the
    experiments that match ``patterns`` under ``root``."""

    def __init__(self, patterns: Iterable[str], root: str | os.PathLike, folder: str | os.PathLike) -> None:
        self.patterns = list(patterns)
        self.root = Path(root)
        self.folder = Path(folder)
        self.missing: list[str] = []

    def _existing_links(self) -> dict[str, str]:
        links: dict[str, str] = {}
        for dirpath, dirnames, filenames in os.walk(self.folder):
            for entry in dirnames + filenames:
                path = Path(dirpath) / entry
                if path.is_symlink():
                    links[path.relative_to(self.folder).as_posix()] = os.readlink(path)
            # never descend through a link into an experiment
            dirnames[:] = [d for d in dirnames if not (Path(dirpath) / d).is_symlink()]
        return links

    def refresh(self) -> tuple[list[str], list[str]]:
        """Add links for new matches, drop links of experiments gone; returns (added, removed) names.

        An experiment without ``.summary/`` yet (a training that is starting) gets its link once the
        folder exists.
        """
        experiments, self.missing = select_experiments(self.patterns, self.root, on_missing="warn")
        wanted: dict[str, str] = {e.name: str(e.summary_dir.resolve()) for e in experiments
                                  if e.summary_dir.is_dir()}
        have = self._existing_links()
        added, removed = [], []
        for name, target in have.items():
            if wanted.get(name) != target:
                (self.folder / name).unlink()
                if name not in wanted:
                    removed.append(name)
        for name, target in wanted.items():
            if have.get(name) == target:
                continue
            link = self.folder / name
            link.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, link, target_is_directory=True)
            if name not in have:
                added.append(name)
        return added, removed

    def names(self) -> list[str]:
        """The experiments linked now."""
        return sorted(self._existing_links())


def port_is_free(host: str, port: int) -> bool:
    """Whether ``port`` can be bound on ``host`` right now."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise TbError(f"--host {host!r} cannot be resolved ({e}): use localhost, 0.0.0.0 or this "
                      f"machine's name") from e
    for family, socktype, proto, _, addr in infos:
        with socket.socket(family, socktype, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(addr)
            except OSError:
                return False
    return True


def choose_port(host: str, port: int) -> int:
    """``port`` if free, else the first free one of the next :data:`PORT_SEARCH`, else 0 (the OS
    picks). 0 stays 0."""
    if not 0 <= port <= 65535:
        raise TbError(f"--port {port} is not allowed: use 0 (any free port) or 1-65535")
    if port == 0:
        return 0
    for candidate in range(port, min(port + PORT_SEARCH, 65536)):
        if port_is_free(host, candidate):
            return candidate
    return 0


def start_tensorboard(logdir: Path, host: str, port: int, reload_sec: float, title: str,
                      tb_args: list[str], quiet: bool = False) -> str:
    """Start TensorBoard's server (in this process, on a background thread); returns its URL.

    ``quiet`` drops TensorBoard's start-up notes (the one about its fast loader); errors still show.
    """
    from tensorboard import program  # heavy: only the server mode needs it

    argv = [None, "--logdir", str(logdir), "--host", host, "--port", str(port),
            "--reload_interval", f"{reload_sec:g}", "--window_title", title, *tb_args]
    tb = program.TensorBoard()
    notes = io.StringIO()
    try:
        with contextlib.redirect_stderr(notes):
            tb.configure(argv=argv)
            url = tb.launch()
    except program.TensorBoardServerException as e:
        raise TbError(f"TensorBoard could not start on {host}:{port}: {e}") from e
    except SystemExit as e:  # tensorboard's own flag parser rejects an argument after --
        sys.stderr.write(notes.getvalue())
        raise TbError(f"TensorBoard rejected the arguments {tb_args}: see its message above") from e
    if not quiet:
        sys.stderr.write(notes.getvalue())
    return url


def serve(patterns: Iterable[str], root: str | os.PathLike = "train_dir", port: int = 6006,
          host: str = "localhost", refresh_every: float = 10.0, quiet: bool = False,
          tb_args: Iterable[str] = (), say: Callable[[str], None] | None = None,
          should_stop: Callable[[], bool] = lambda: False) -> int:
    """Start TensorBoard on the matching experiments, print its URL, keep the runs up to date.

    Blocks until Ctrl+C or SIGTERM (or ``should_stop()``), then removes the link folder.
    Returns the exit status (0).
    """
    say = say or (lambda text: print(text, flush=True))
    patterns = list(patterns)
    if refresh_every <= 0:
        raise TbError(f"--refresh_every {refresh_every:g} is not allowed: use a period in seconds > 0")
    # checked before anything starts: a wrong --dir fails at once
    select_experiments(patterns, root, on_missing="warn")
    chosen = choose_port(host, port)
    if chosen != port and not quiet:
        say(f"port {port} is in use: using {'a free port' if chosen == 0 else chosen}")

    previous_term = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGTERM, on_term)
    except ValueError:
        previous_term = None  # not the main thread (a notebook's worker): Ctrl+C only
    folder: Path | None = None
    try:
        folder = Path(tempfile.mkdtemp(prefix="sfx_tb_"))
        farm = LinkFarm(patterns, root, folder)
        farm.refresh()
        for message in farm.missing:
            print(f"sfx.tb: warning: {message} (it is watched: a matching folder appears when created)",
                  file=sys.stderr, flush=True)
        if not quiet:
            names = farm.names()
            say(f"{len(names)} experiment(s) matched under {root}:" + "".join(f"\n  {n}" for n in names))
        title = "sfx: " + " ".join(patterns)
        url = start_tensorboard(folder, host, chosen, min(5.0, refresh_every), title, list(tb_args), quiet)
        say(f"TensorBoard at {url}" + ("" if quiet else f" (runs refreshed every {refresh_every:g} s; "
                                                          f"links in {folder}; Ctrl+C to stop)"))
        next_refresh = time.monotonic() + refresh_every
        while not should_stop():
            time.sleep(min(0.2, max(0.0, next_refresh - time.monotonic())))
            if time.monotonic() < next_refresh:
                continue
            next_refresh = time.monotonic() + refresh_every
            added, removed = farm.refresh()
            if not quiet:
                for name in added:
                    say(f"+ {name}")
                for name in removed:
                    say(f"- {name}")
    except KeyboardInterrupt:
        if not quiet:
            say("stopping TensorBoard")
    finally:
        _remove_links(folder)
        if previous_term is not None:
            signal.signal(signal.SIGTERM, previous_term)
    return 0


def _remove_links(folder: Path | None) -> None:
    """Remove the link folder; a second Ctrl+C (or SIGTERM) meanwhile must not leave it half removed."""
    if folder is None:
        return
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN), signal.signal(signal.SIGTERM, signal.SIG_IGN)
    except ValueError:
        previous = None  # not the main thread: signals go elsewhere anyway
    try:
        shutil.rmtree(folder, ignore_errors=True)  # unlinks the links, never follows them
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous[0])
            signal.signal(signal.SIGTERM, previous[1])


def describe(experiments: list[ExperimentDir]) -> str:
    """The matches as text lines: name, group and seed (``--list``)."""
    if not experiments:
        return "no experiment matched"
    width = max(len(e.name) for e in experiments)
    lines = [f"{'experiment'.ljust(width)}  seed  group"]
    lines += [f"{e.name.ljust(width)}  {str(e.seed) if e.seed is not None else '-':>4}  {e.group}" for e in experiments]
    return "\n".join(lines)
