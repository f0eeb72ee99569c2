"""How the contact kernels of the analytic adjoint spread MJWarp's contacts over threads.

MJWarp keeps `naconmax` contact slots (48 per world by default) of which a small model fills a few;
a kernel launched over every slot (and every row of each) pays the per-thread cost of a CPU launch
(its arguments copied for each thread) for each empty one: on a small contact model at many worlds
that was most of the backward pass (`benchmarks/bench_adjoint.py`'s small contact models). The
contact kernels instead launch `contact_threads(...)` threads, each walking a contiguous share of
the filled slots `[0, nacon)` (`contact_range`) in ascending order: on the CPU, where threads run one
after another, the forward sums keep the order of one thread per slot; the reverse pass walks each
share backwards, so the adjoints' sums differ from a thread per slot by float32 rounding. On a GPU a
thread per slot (a share of at most one contact) keeps the parallelism.
"""

from __future__ import annotations

import warp as wp

__all__ = ["contact_range", "contact_threads"]


def contact_threads(nc: int, nworld: int, device) -> int:
  """Threads of a contact kernel over `nc` contact slots: one per world on the CPU, one per slot on a
  GPU."""
  return max(1, nc if device.is_cuda else min(nc, nworld))


@wp.func
def contact_range(t: int, nthread: int, nacon: wp.array[int], nc: int) -> wp.vec2i:
  """Thread `t`'s contiguous share `[lo, hi)` of the filled contact slots `[0, nacon[0])` (of `nc`)
  among `nthread` threads."""
  n = wp.min(nacon[0], nc)
  size = (n + nthread - 1) / nthread
  lo = wp.min(t * size, n)
  return wp.vec2i(lo, wp.min(lo + size, n))
