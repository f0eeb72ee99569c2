"""Writing a benchmark's results: `write_json`, `write_text`, which never leave a half-written file behind."""

from __future__ import annotations

import json
import os

__all__ = ["write_json", "write_text"]


def write_json(path: str, payload) -> None:
  """Writes to a temporary file, then renames: an interrupted run leaves the old results intact."""
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(payload, f, indent=1)
  os.replace(tmp, path)


def write_text(path: str, text: str) -> None:
  """`text` and a newline to `path`, through a temporary file as `write_json`."""
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    f.write(text + "\n")
  os.replace(tmp, path)
