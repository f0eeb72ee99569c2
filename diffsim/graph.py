"""Graph capture of launch sequences that run again and again (solver iterations, rollouts).

A `wp.ScopedCapture` records a sequence of launches once; `wp.capture_launch` replays it without
Python: CUDA graphs on a GPU and, since Warp 1.19, CPU graphs, where an MJWarp step replays in tens
of microseconds instead of the milliseconds its Python launches cost.
"""

from __future__ import annotations

import warnings
from typing import Callable

import warp as wp

__all__ = ["capture", "Replay"]


def capture(device, stages: list) -> tuple[list | None, bool]:
  """Graphs `[(graph, repeats)]` of the stages `[(fn, repeats)]`, or None where capture fails.

  On CUDA every stage first runs eagerly (modules must load outside a capture, and errors then come
  with a Python traceback): returns whether it did. CPU graphs load modules as they go, so the slow,
  Python-bound eager pass is skipped there.
  """
  ran = device.is_cuda
  if ran:
    for fn, reps in stages:
      for _ in range(reps):
        fn()
  try:
    graphs = []
    for fn, reps in stages:
      with wp.ScopedCapture(device=device) as cap, warnings.catch_warnings():
        # the callers refresh inertial parameters' derived constants before replaying
        warnings.filterwarnings("ignore", message="inertial parameters in a captured graph")
        fn()
      graphs.append((cap.graph, reps))
  except Exception as e:  # a device or driver without graph support: stay eager
    warnings.warn(f"graph capture failed, running eagerly ({type(e).__name__}: {e})", stacklevel=3)
    return None, ran
  return graphs, ran


class Replay:
  """Launch stages `[(fn, repeats)]` (or one function), captured on the first call and replayed after.

  Each `fn` must only launch kernels on fixed buffers (no allocation, no host reads). With
  `enabled=False`, or where capture fails, the stages run eagerly every time.
  """

  def __init__(self, device, stages: list | Callable[[], None], enabled: bool = True):
    self.device, self.enabled = device, enabled
    self.stages = [(stages, 1)] if callable(stages) else list(stages)
    self.graphs = None

  def __call__(self) -> None:
    if self.graphs is None and self.enabled:
      self.graphs, ran = capture(self.device, self.stages)
      self.enabled = self.graphs is not None
      if ran:
        return
    if self.graphs:
      for graph, reps in self.graphs:
        for _ in range(reps):
          wp.capture_launch(graph)
    else:
      for fn, reps in self.stages:
        for _ in range(reps):
          fn()
