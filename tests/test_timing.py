"""`benchmarks.timing`: turns, repeats and CPU pinning (what the benchmarks' fairness rests on; no
timed assertions)."""

import os
import threading

import pytest

from benchmarks.timing import alternate, cpus, pinned, spread


def test_alternate_takes_turns_and_repeats_until_the_spread_settles():
  calls = []
  fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
  times = alternate(fns, repeats=3, target=float("inf"))  # settled at once: the minimum of rounds
  assert calls == ["a", "b", "b", "a", "a", "b"] and all(len(v) == 3 for v in times.values())
  calls.clear()
  times = alternate(fns, repeats=2, max_repeats=5, target=-1.0)  # never settled: up to max_repeats
  assert len(calls) == 10 and all(len(v) == 5 for v in times.values())
  assert spread([1.0, 1.2, 0.8]) == pytest.approx(0.4) and spread([3.0]) == 0.0


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux-only")
def test_pinned_moves_every_thread_and_restores_them():
  allowed = set(cpus())
  seen = {}
  started = threading.Event()
  release = threading.Event()

  def worker():  # a pool thread started before the pinning, like XLA's
    started.set()
    release.wait()
    seen["worker"] = os.sched_getaffinity(0)

  t = threading.Thread(target=worker)
  t.start()
  started.wait()
  with pinned(1):
    assert len(os.sched_getaffinity(0)) == 1
    inner = threading.Thread(target=lambda: seen.setdefault("inner", os.sched_getaffinity(0)))
    inner.start()
    inner.join()
    release.set()
    t.join()
  assert len(seen["worker"]) == 1 and len(seen["inner"]) == 1
  assert os.sched_getaffinity(0) == allowed
