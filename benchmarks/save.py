"""Writing a benchmark's results: `write_json`, which never leaves a half-written file behind."""

from __future__ import annotations

import json
import os

__all__ = ["write_json"]


def write_json(path: str, payload) -> None:
  """Writes to a temporary file, then renames: an interrupted run leaves the old results intact."""
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(payload, f, indent=1)
  os.replace(tmp, path)
