"""What this process may use of its machine. Standard library only: the plotting process
(`diffsim.plot_process`) and the distributed layer (`diffsim.distributed`) both ask it."""

from __future__ import annotations

import os

__all__ = ["local_cores"]


def local_cores() -> int:
  """CPU cores this process may use."""
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
