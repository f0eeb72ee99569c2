"""`atomic_write`: every file diffsim writes (results, models, plots, recordings) goes through a
temporary file in the same folder and a rename, so that a failure never leaves a partial file or
loses the one a user saved before. Standard library only: the plotting process imports it without
Warp (`diffsim.plot_process`)."""

from __future__ import annotations

import os
import tempfile

__all__ = ["atomic_write"]


def atomic_write(path: str, write) -> None:
  """Writes through a temporary file in the same folder, then renames: never leaves a partial file."""
  path = os.fspath(path)
  folder = os.path.dirname(os.path.abspath(path))
  os.makedirs(folder, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
  try:
    with os.fdopen(fd, "wb") as f:
      write(f)
    # mkstemp makes the file private (0600); give it the mode a plain open() would (umask applied)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise
