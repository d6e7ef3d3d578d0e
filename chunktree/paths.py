"""Where chunktree keeps what it builds once per machine: converted models and the embedding cache."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "CHUNKTREE_CACHE_DIR"


def cache_dir() -> Path:
    """The user cache directory: ``$CHUNKTREE_CACHE_DIR``, else ``$XDG_CACHE_HOME/chunktree``,
    else ``~/.cache/chunktree``. Created on first use."""
    root = os.environ.get(CACHE_ENV)
    if root:
        path = Path(root).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        path = (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "chunktree"
    path.mkdir(parents=True, exist_ok=True)
    return path
