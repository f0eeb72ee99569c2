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
    self._pruned = {}

  def grad(self, a: wp.array) -> wp.array:
    g = wp.zeros(a.shape, dtype=a.dtype, device=self.device)
    self.grads[id(a)] = g
    return g

  def pool(self, grads: list[wp.array]) -> wp.array:
    """Moves the adjoints `grads` (values of `self.grads`, all zero) into one buffer, as views, so that one
    fill zeroes them all (a zero-fill per array was half a small model's launches per reverse pass);
    returns the buffer. Call before anything keeps a reference to them."""
    key = {id(g): k for k, g in self.grads.items()}
    offsets, size = [], 0
    for g in grads:
      offsets.append(size)
      size += (g.capacity + 15) // 16 * 16
    buf = wp.zeros(max(size, 16), dtype=wp.uint8, device=self.device)
    for g, off in zip(grads, offsets):
      self.grads[key[id(g)]] = wp.array(ptr=buf.ptr + off, dtype=g.dtype, shape=g.shape, device=self.device)
    self._pools = getattr(self, "_pools", []) + [buf]  # the views do not own their memory
    return buf

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

  def pruned(self, segments: tuple[str, ...], seeds: list[wp.array]) -> list:
    """The launches of `segments` (each walked in reverse, in the order given) whose outputs reach
    `seeds`, the only arrays with nonzero adjoints when the reverse pass starts: the others would
    add zeros (the state rows of a step Jacobian skip the sensors, its sensor rows the dynamics)."""
    key = (segments, tuple(sorted(id(a) for a in seeds)))
    if key not in self._pruned:
      live, out = {id(a) for a in seeds}, []
      for seg in segments:
        for launch in reversed(self.segments.get(seg, ())):
          _, _, inputs, outputs, backward = launch
          if backward and any(isinstance(a, wp.array) and id(a) in live for a in outputs):
            out.append(launch)
            live.update(id(a) for a in inputs if isinstance(a, wp.array) and id(a) in self.grads)
      self._pruned[key] = out
    return self._pruned[key]

  def backward_from(self, segments: tuple[str, ...], seeds: list[wp.array]):
    """`backward` of `segments` in turn, only the launches that reach `seeds` (`pruned`)."""
    for kernel, dim, inputs, outputs, _ in self.pruned(segments, seeds):
      wp.launch(kernel, dim=dim, inputs=inputs, outputs=outputs, device=self.device, adjoint=True,
                adj_inputs=[self._adj(a) for a in inputs], adj_outputs=[self._adj(a) for a in outputs])
