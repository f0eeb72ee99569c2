"""The replay's recorder: launches recorded once, run forward, then in reverse with Warp's generated
adjoints."""

from __future__ import annotations

import warp as wp


class _Program:
  """Launches replayed forward and then in reverse with Warp's generated adjoints.

  `grads` maps an array (by id) to its adjoint; arrays without one get `None` (no gradient)."""

  def __init__(self, device):
    self.device = device
    self.segments = {}
    self.grads = {}

  def grad(self, a: wp.array) -> wp.array:
    g = wp.zeros(a.shape, dtype=a.dtype, device=self.device)
    self.grads[id(a)] = g
    return g

  def launch(self, segment: str, kernel, dim, inputs, outputs, backward: bool = True):
    """Records a launch; `backward=False`: forward only (a discrete choice or an iterate the reverse
    pass treats as a constant; its outputs get no adjoint)."""
    self.segments.setdefault(segment, []).append((kernel, dim, inputs, outputs, backward))

  def forward(self, segment: str):
    for kernel, dim, inputs, outputs, _ in self.segments.get(segment, ()):
      wp.launch(kernel, dim=dim, inputs=inputs, outputs=outputs, device=self.device)

  def _adj(self, a):
    return self.grads.get(id(a)) if isinstance(a, wp.array) else None

  def backward(self, segment: str):
    for kernel, dim, inputs, outputs, backward in reversed(self.segments.get(segment, ())):
      if not backward:
        continue
      wp.launch(kernel, dim=dim, inputs=inputs, outputs=outputs, device=self.device, adjoint=True,
                adj_inputs=[self._adj(a) for a in inputs], adj_outputs=[self._adj(a) for a in outputs])
