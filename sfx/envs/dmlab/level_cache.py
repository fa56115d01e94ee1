"""A folder-based level cache for DeepMind Lab (``Lab(..., level_cache=...)``).

Levels such as ``explore_goal_locations_small`` compile a new map for every episode, which takes
seconds. DeepMind Lab asks the level cache object for a compiled map by key before compiling and
hands it every map it compiles; the protocol is two methods:

* ``fetch(key, pk3_path) -> bool``: if ``key`` is cached, copy it to ``pk3_path`` and return True.
* ``write(key, pk3_path)``: the map for ``key`` has just been compiled to ``pk3_path``.

One folder is shared by every rollout worker (and by concurrent runs), so writes go to a unique
temporary file first and are renamed into place: a reader never sees half a file, and two
workers writing the same key leave one whole copy.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


class DirectoryLevelCache:
    """Compiled maps stored as ``<cache_dir>/<key>`` files.

    Args:
        cache_dir: the folder (created if missing).
    """

    def __init__(self, cache_dir: str | os.PathLike) -> None:
        self.cache_dir = Path(cache_dir).expanduser()
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        self.hits = 0
        self.misses = 0

    def _path(self, key: str) -> Path:
        # keys are hex digests in DeepMind Lab; refuse anything that could leave the folder
        if not key or "/" in key or "\\" in key or key in (".", "..") or "\0" in key:
            raise ValueError(f"bad level cache key {key!r}")
        return self.cache_dir / key

    def fetch(self, key: str, pk3_path: str) -> bool:
        """Copy the cached map ``key`` to ``pk3_path``; False if it is not cached."""
        path = self._path(key)
        try:
            shutil.copyfile(path, pk3_path)
        except FileNotFoundError:
            self.misses += 1
            return False
        self.hits += 1
        return True

    def write(self, key: str, pk3_path: str) -> None:
        """Store the map DeepMind Lab compiled to ``pk3_path`` under ``key`` (kept if already there)."""
        path = self._path(key)
        if path.exists():
            return
        fd, tmp = tempfile.mkstemp(dir=self.cache_dir, prefix=f".{key}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out, open(pk3_path, "rb") as src:
                shutil.copyfileobj(src, out)
            os.replace(tmp, path)
        except OSError as e:
            # a full disk must not stop training: the map is only not cached
            log.warning("level cache: could not store %s in %s: %s", key, self.cache_dir, e)
            try:
                os.unlink(tmp)
            except OSError:
                pass
