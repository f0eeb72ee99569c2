"""Timing that compares fairly on a shared machine: rivals take turns, repeats go on until the times
settle, and the CPUs a measurement may use are pinned.

- `alternate`: wall times of several functions, each round running all of them (in reversed order
  every other round, so that a load spike or a warming cache hits all alike), at least `repeats`
  rounds and more while any function's spread is above `spread`, up to `max_repeats` rounds or
  `budget_s` seconds;
- `spread`: (max - min) / median of a list of times, the figure the tables report beside a median;
- `pinned(ncpu)`: runs a block with every thread of this process (and the threads it starts) on
  `ncpu` of the CPUs the process may use. Warp runs each CPU kernel on one thread, whereas MuJoCo C's
  `rollout`, `mujoco.sysid` and XLA spread over all cores: a row "1 core" pins both sides to one
  CPU, a row "all cores" gives both every CPU (Linux only; elsewhere a no-op that says so).
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Callable

import numpy as np

__all__ = ["alternate", "spread", "pinned", "cpus"]


def spread(times) -> float:
  """(max - min) / median of `times`; 0 for fewer than two."""
  t = np.asarray(times, float)
  return float((t.max() - t.min()) / max(np.median(t), 1e-300)) if t.size > 1 else 0.0


def alternate(fns: dict[str, Callable[[], object]], *, repeats: int = 3, max_repeats: int | None = None,
              target: float = 0.1, budget_s: float = 120.0, sync: Callable[[], None] | None = None
              ) -> dict[str, list[float]]:
  """Wall times (s) of each function of `fns` over rounds in which every function runs once.

  Args:
    fns: name -> function (warmed up by the caller).
    repeats: rounds at least.
    max_repeats: rounds at most (default `3 * repeats`).
    target: more rounds while some function's `spread` is above this, within `max_repeats` and
      `budget_s`.
    budget_s: no new round once this many seconds have passed.
    sync: called after each function, inside its time (e.g. `wp.synchronize`).

  Returns:
    name -> list of wall times, one per round.
  """
  max_repeats = 3 * repeats if max_repeats is None else max(max_repeats, repeats)
  times = {k: [] for k in fns}
  start = time.perf_counter()
  for r in range(max_repeats):
    if r >= repeats and (all(spread(v) <= target for v in times.values())
                         or time.perf_counter() - start > budget_s):
      break
    for k in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
      t = time.perf_counter()
      fns[k]()
      if sync is not None:
        sync()
      times[k].append(time.perf_counter() - t)
  return times


def cpus() -> list[int]:
  """The CPUs this process may run on."""
  return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


@contextlib.contextmanager
def pinned(ncpu: int | None):
  """Every thread of this process on the first `ncpu` of its CPUs within the block (`None`: all).

  Threads started inside inherit the pinning; XLA's and MuJoCo's thread pools, started earlier, are
  moved too (each thread of `/proc/self/task`)."""
  allowed = cpus()
  if ncpu is None or not hasattr(os, "sched_setaffinity") or not os.path.isdir("/proc/self/task"):
    yield
    return
  target = set(allowed[:max(1, ncpu)])
  before = {}
  for tid in os.listdir("/proc/self/task"):
    with contextlib.suppress(OSError):  # a thread that has exited meanwhile
      before[int(tid)] = os.sched_getaffinity(int(tid))
      os.sched_setaffinity(int(tid), target)
  try:
    yield
  finally:
    for tid in os.listdir("/proc/self/task"):
      with contextlib.suppress(OSError):
        os.sched_setaffinity(int(tid), before.get(int(tid), set(allowed)))
