"""Logging: every process writes ``[time][process] message`` lines to stderr and to the shared sf_log.txt."""

from __future__ import annotations

import io
import logging
import os
import sys
from pathlib import Path
from typing import Any

from sfx.experiment.paths import log_path

_SFX_HANDLER = "_sfx_handler"  # marks the handlers installed here, so a second call replaces them
# lines kept while a log file's folder does not exist yet (a run's first lines, before its checks pass)
WAITING_BYTES = 1 << 20


class LineFormatter(logging.Formatter):
    """``[2024-01-01 12:00:00,123][learner_0] message``; the level is shown only when it is not INFO."""

    def __init__(self, process_name: str) -> None:
        super().__init__()
        self.process_name = process_name

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.levelno != logging.INFO:
            message = f"{record.levelname}: {message}"
        if record.exc_info:
            message = f"{message}\n{self.formatException(record.exc_info)}"
        return f"[{self.formatTime(record)}][{self.process_name}] {message}"


class AppendFileHandler(logging.StreamHandler):
    """Appends to a file shared by many processes.

    The file is opened in append mode (O_APPEND: every write lands at the current end, whoever else
    wrote) and line-buffered, so each record goes out in one write instead of interleaving mid-line.
    """

    def __init__(self, path: Path, create_folder: bool = True) -> None:
        """``create_folder=False``: the file's folder is someone else's to make (an experiment folder is
        made by its run once the run's checks passed, so a refused start leaves none behind); until it
        exists, lines wait in memory (up to :data:`WAITING_BYTES`, they also went to the console) and are
        written first once it does."""
        self.path = path
        if create_folder:
            path.parent.mkdir(parents=True, exist_ok=True)
        self._waiting = not path.parent.is_dir()
        super().__init__(io.StringIO() if self._waiting else self._open())

    def _open(self) -> Any:
        return open(self.path, "a", buffering=1, encoding="utf-8")

    def _write_what_waited(self) -> None:
        file = self._open()
        file.write(self.stream.getvalue())
        self.setStream(file)
        self._waiting = False

    def handleError(self, record: logging.LogRecord) -> None:
        """A write that fails (disk full, quota) is reported once on stderr, not as a traceback per
        record; the console keeps every line, and the file gets them again once writes succeed."""
        self._write_failed = True
        if not getattr(self, "_failing", False):
            self._failing = True
            error = sys.exc_info()[1]
            sys.stderr.write(f"sfx: warning: cannot write the log file {self.path} ({error}); "
                             f"log lines go to the console only until it works again\n")

    def emit(self, record: logging.LogRecord) -> None:
        self._write_failed = False
        if self._waiting:
            if self.path.parent.is_dir():
                try:
                    self._write_what_waited()
                except OSError:
                    self.handleError(record)  # said once; the lines stay in memory until a write works
                    return
            elif self.stream.tell() > WAITING_BYTES:
                return
        super().emit(record)
        if not self._write_failed:
            self._failing = False  # a line got through: the disk has room again

    def close(self) -> None:
        try:
            self.acquire()
            try:
                if self.stream and not self.stream.closed:
                    self.stream.close()
            finally:
                self.release()
        finally:
            super().close()


def remove_logging() -> None:
    """Remove (and close) the handlers :func:`setup_logging` installed on the root logger."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, _SFX_HANDLER, False):
            root.removeHandler(handler)
            handler.close()


def setup_logging(cfg_or_path: Any, process_name: str, level: int = logging.INFO) -> Path | None:
    """Configure the root logger of this process; calling it again replaces the previous setup.

    Args:
        cfg_or_path: a cfg (logs go to its experiment's ``sf_log.txt`` once the run has made its folder;
            earlier lines are written then), a log file path (its folder is made now), or ``None``
            (stderr only).
        process_name: shown in every line (``coordinator``, ``rollout_worker_3`` ...).
    Returns:
        the log file's path, or ``None``.
    """
    if cfg_or_path is None:
        path = None
    elif isinstance(cfg_or_path, (str, os.PathLike)):
        path = Path(cfg_or_path)
    else:
        path = log_path(cfg_or_path)
    # a cfg's experiment folder is its run's to make, after the checks that may refuse the start (no
    # folder holding only sf_log.txt after a typo); a path given as such is made here
    by_cfg = path is not None and not isinstance(cfg_or_path, (str, os.PathLike))

    remove_logging()
    formatter = LineFormatter(process_name)
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if path is not None:
        handlers.append(AppendFileHandler(path, create_folder=not by_cfg))
    root = logging.getLogger()
    for handler in handlers:
        handler.setFormatter(formatter)
        setattr(handler, _SFX_HANDLER, True)
        root.addHandler(handler)
    root.setLevel(level)
    return path
