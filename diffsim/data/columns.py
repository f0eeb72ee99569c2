"""Model elements as CSV column names (`qpos:<joint>`, `ctrl:<actuator>`, `sensor:<sensor>[i]`, ...), for
reading and writing CSV and for naming a column in an error message.
"""

from __future__ import annotations

import mujoco

from .. import joints

__all__ = ["csv_columns", "csv_column"]

def csv_columns(mjm: mujoco.MjModel) -> dict[str, tuple[str, int]]:
  """Every accepted CSV column name: `name -> (kind, index into the kind's vector)`."""
  cols: dict[str, tuple[str, int]] = {}
  bare: dict[str, list[tuple[str, int]]] = {}

  def add(kind, name, start, size, prefixes):
    for i in range(size):
      for p in prefixes:
        key = f"{p}:{name}" + (f"[{i}]" if size > 1 else "")
        cols[key] = (kind, start + i)
      bare.setdefault(name + (f"[{i}]" if size > 1 else ""), []).append((kind, start + i))

  nq_j, nv_j = joints.QPOS_WIDTH, joints.DOF_WIDTH
  for j in range(mjm.njnt):
    name = mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_JOINT, j)
    if name:
      t = int(mjm.jnt_type[j])
      add("qpos", name, int(mjm.jnt_qposadr[j]), nq_j[t], ["qpos"])
      cols.update({f"qvel:{name}" + (f"[{i}]" if nv_j[t] > 1 else ""): ("qvel", int(mjm.jnt_dofadr[j]) + i)
                   for i in range(nv_j[t])})
  for a in range(mjm.nu):
    name = mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_ACTUATOR, a)
    if name:
      add("ctrl", name, a, 1, ["ctrl"])
      if mjm.actuator_actadr[a] >= 0:
        for i in range(int(mjm.actuator_actnum[a])):
          key = f"act:{name}" + (f"[{i}]" if mjm.actuator_actnum[a] > 1 else "")
          cols[key] = ("act", int(mjm.actuator_actadr[a]) + i)
  for s in range(mjm.nsensor):
    name = mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_SENSOR, s)
    if name:
      add("sensordata", name, int(mjm.sensor_adr[s]), int(mjm.sensor_dim[s]), ["sensor", "sensordata"])
  sizes = (("qpos", mjm.nq), ("qvel", mjm.nv), ("ctrl", mjm.nu), ("act", mjm.na), ("sensordata", mjm.nsensordata))
  for kind, n in sizes:
    for i in range(n):
      cols[f"{kind}[{i}]"] = (kind, i)
  for name, hits in bare.items():
    if len(hits) == 1 and name not in cols:
      cols[name] = hits[0]
    elif len(hits) > 1:
      cols.setdefault(name, ("ambiguous", -1))
  return cols


def csv_column(mjm, kind: str, i: int) -> str:
  """The CSV name of column `i` of `kind` (`qpos:elbow`, `ctrl:servo`, `sensor:tip[2]`), else `kind[i]`."""
  for name, (k, j) in csv_columns(mjm).items():
    if k == kind and j == i and ":" in name:
      return name
  return f"{kind}[{i}]"
