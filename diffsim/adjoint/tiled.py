"""`TiledReplay`: one step's replay on `copies x nworld` worlds, so that `AnalyticJacobian` runs
several of a step's reverse sweeps as one reverse pass, each copy seeded with its own row.

On a small batch a reverse sweep costs its launches, not its arithmetic (the SO-101 arm at one
world: about 35 launches per sweep, 5 sweeps per step), so sweeping `copies` rows at once divides
the launches by `copies` for `copies` times the (small) arithmetic per launch.

Worlds are sweep-major: world `c * nworld + w` is copy `c` of world `w`. A batched model field, read
as `field[w % field.shape[0]]`, then reads world `w`'s row in every copy, and the trajectory loads
read world `w % nworld` (`step._load_step`). The fields whose adjoints the sweeps read (the
parameters', the tied bias, the invweight0 arrays the inertial parameters reach) get
`copies * nworld` rows of their own, refreshed from the scene's at `refresh()`, so that each copy's
adjoint lands in its own row. Contacts: the copies' states are their worlds', so the base step's
collision of the worlds (MJWarp's, the costly part of a replay with contacts) is run once and its
frozen contacts tiled to every copy (`ContactRows.tile`), not collided `copies` times.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import warp as wp

from ..params import flat_rows, model_field, model_rows, set_model_field

__all__ = ["TiledReplay"]

_INERTIAL = {"body_mass", "body_inertia", "dof_armature"}


@wp.kernel(enable_backward=False)
def _tile_rows(
  # In:
  nworld: int,
  src: wp.array2d[float],  # (rows, ncol) flat view of the scene's field
  # Out:
  dst: wp.array2d[float],  # (copies * nworld, ncol)
):
  r, c = wp.tid()
  dst[r, c] = src[(r % nworld) % src.shape[0], c]  # the row the copy's world reads in the scene


class _TiledScene:
  """The scene, seen with `copies * nworld` worlds and a model whose gradient fields are tiled."""

  def __init__(self, scene, model, nworld: int):
    self._scene, self.model, self.nworld = scene, model, nworld

  def __getattr__(self, name):
    return getattr(self._scene, name)


class TiledReplay:
  """An `AnalyticStep` (`.step`) on `copies` copies of `analytic`'s worlds (see the module docstring).

  Only its replay and reverse pass are used: MJWarp's step runs on `analytic`'s worlds."""

  def __init__(self, analytic, copies: int):
    from .step import AnalyticStep

    self._AnalyticStep = AnalyticStep
    self.base, self.copies = analytic, int(copies)
    s = analytic.scene
    self.nworld = self.copies * s.nworld
    fields = set(analytic.layout.fields)
    if any(p.tie_bias is not None for p in analytic.layout.params):
      fields.add("actuator_biasprm")
    if fields & _INERTIAL:
      fields |= {"body_invweight0", "dof_invweight0"}
    self._own = fields
    self._key = None
    self.build()

  def _fields(self) -> list[str]:
    """The fields with rows of their own: the adjoints' (`_own`) and every field batched on the scene
    (their extra rows, a lane's, are not the world's: a copy must read its world's row, not row
    `c * nworld + w` of them)."""
    return sorted(self._own | set(model_rows(self.base.scene).nominal))

  def _source_key(self) -> tuple:
    return tuple((f, id(model_field(self.base.scene.model, f))) for f in self._fields())

  def build(self) -> None:
    """Makes the tiled model and its `AnalyticStep` (again when a scene field was reallocated)."""
    key = self._source_key()
    if key == self._key:
      return
    s = self.base.scene
    if s.device.is_capturing:
      raise RuntimeError("a parameter's model field was reallocated after this Rollout was built; run its "
                         "linearization once eagerly before capturing it")
    self.fields = self._fields()
    m = copy.copy(s.model)
    if any(f.startswith("opt.") for f in self.fields):
      m.opt = copy.copy(s.model.opt)
    self._pairs = []
    for f in self.fields:
      src = model_field(s.model, f)
      dst = wp.zeros((self.nworld,) + tuple(src.shape[1:]), dtype=src.dtype, device=s.device)
      set_model_field(m, f, dst)
      width = wp.types.type_size(src.dtype)
      self._pairs.append((flat_rows(src, width), flat_rows(dst, width)))
    fwd = self.base.fwd.data
    # the contacts' own Data (`ContactRows`) holds every copy's contacts: naconmax is over all worlds
    data = SimpleNamespace(data=SimpleNamespace(naconmax=fwd.naconmax * self.copies, njmax=fwd.njmax))
    self.step = self._AnalyticStep(_TiledScene(s, m, self.nworld), self.base.layout, data)
    self.step.contacts_from = self.base.contacts  # one collision for all copies (`ContactRows.tile`)
    self._key = key
    self.refresh()

  def refresh(self) -> None:
    """Copies the scene's current field values into every copy's rows (once per rollout)."""
    dev = self.base.scene.device
    for src, dst in self._pairs:
      wp.launch(_tile_rows, dim=dst.shape, device=dev, inputs=[self.base.scene.nworld, src], outputs=[dst])
