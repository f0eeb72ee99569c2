"""diffsim.joints against MuJoCo's own tangent-space maths (mj_differentiatePos, mj_integratePos)."""

import mujoco
import numpy as np
import pytest
import warp as wp

from diffsim import joints

_XML = """
<mujoco>
  <worldbody>
    <body><freejoint/><geom size=".1"/>
      <body pos="0 0 .3"><joint type="ball"/><geom size=".1"/>
        <body pos="0 0 .3"><joint type="hinge" axis="0 1 0"/><joint type="slide" axis="1 0 0"/><geom size=".1"/>
        </body>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


@pytest.fixture(scope="module")
def mjm():
  return mujoco.MjModel.from_xml_string(_XML)


def _random_qpos(mjm, rng):
  q = rng.normal(size=mjm.nq)
  for a in joints.quat_addresses(mjm):
    q[a:a + 4] /= np.linalg.norm(q[a:a + 4])
  return q


def _ints(mjm, dev):
  return [wp.array(getattr(mjm, f).astype(np.int32), dtype=int, device=dev)
          for f in ("jnt_type", "jnt_qposadr", "jnt_dofadr", "dof_jntid")]


@wp.kernel
def _diff_kernel(jt: wp.array[int], jq: wp.array[int], jd: wp.array[int], dj: wp.array[int],
                 qa: wp.array2d[float], qb: wp.array2d[float], out: wp.array[float]):
  c = wp.tid()
  out[c] = joints.qpos_diff(c, jt, jq, jd, dj, qa, 0, qb, 0)


@wp.kernel
def _move_kernel(jt: wp.array[int], jq: wp.array[int], jd: wp.array[int], dj: wp.array[int], h: float,
                 qpos: wp.array2d[float]):
  c = wp.tid()  # one row per coordinate
  joints.qpos_move(c, h, jt, jq, jd, dj, qpos, c)


@wp.kernel
def _grad_kernel(jt: wp.array[int], jq: wp.array[int], jd: wp.array[int], dj: wp.array[int],
                 qpos: wp.array2d[float], g: wp.array2d[float], out: wp.array[float]):
  c = wp.tid()
  out[c] = joints.tangent_grad(c, jt, jq, jd, dj, qpos, 0, g, 0)


def test_counts(mjm):
  assert [joints.QPOS_WIDTH[int(t)] for t in mjm.jnt_type] == [7, 4, 1, 1]
  assert sum(joints.DOF_WIDTH[int(t)] for t in mjm.jnt_type) == mjm.nv
  assert joints.quat_addresses(mjm) == [3, 7]


def test_qpos_diff_and_move_match_mujoco(mjm):
  dev = "cpu"
  rng = np.random.default_rng(0)
  qa, qb = _random_qpos(mjm, rng), _random_qpos(mjm, rng)
  qb = joints.qpos_integrate_np(mjm, qa, 0.3 * rng.normal(size=mjm.nv))  # within one turn of qa
  ref = np.zeros(mjm.nv)
  mujoco.mj_differentiatePos(mjm, ref, 1.0, qb, qa)
  np.testing.assert_allclose(joints.qpos_diff_np(mjm, qa, qb), ref, atol=1e-12)
  out = wp.zeros(mjm.nv, dtype=float, device=dev)
  wp.launch(_diff_kernel, dim=mjm.nv, device=dev,
            inputs=[*_ints(mjm, dev), wp.array(qa[None].astype(np.float32), dtype=float, device=dev),
                    wp.array(qb[None].astype(np.float32), dtype=float, device=dev)], outputs=[out])
  np.testing.assert_allclose(out.numpy(), ref, atol=2e-6)

  h = 0.2
  rows = wp.array(np.tile(qa, (mjm.nv, 1)).astype(np.float32), dtype=float, device=dev)
  wp.launch(_move_kernel, dim=mjm.nv, device=dev, inputs=[*_ints(mjm, dev), h], outputs=[rows])
  for c in range(mjm.nv):
    np.testing.assert_allclose(rows.numpy()[c], joints.qpos_integrate_np(mjm, qa, h * np.eye(mjm.nv)[c]), atol=2e-6)


def test_tangent_grad_is_the_chain_rule(mjm):
  """d f(qpos (+) v) / dv at v = 0 for a linear f(qpos) = g . qpos, by central differences in float64."""
  dev = "cpu"
  rng = np.random.default_rng(1)
  q, g = _random_qpos(mjm, rng), rng.normal(size=mjm.nq)
  fd = np.array([(g @ joints.qpos_integrate_np(mjm, q, 1e-6 * e) - g @ joints.qpos_integrate_np(mjm, q, -1e-6 * e))
                 / 2e-6 for e in np.eye(mjm.nv)])
  np.testing.assert_allclose(joints.tangent_grad_np(mjm, q, g), fd, atol=1e-8)
  out = wp.zeros(mjm.nv, dtype=float, device=dev)
  wp.launch(_grad_kernel, dim=mjm.nv, device=dev,
            inputs=[*_ints(mjm, dev), wp.array(q[None].astype(np.float32), dtype=float, device=dev),
                    wp.array(g[None].astype(np.float32), dtype=float, device=dev)], outputs=[out])
  np.testing.assert_allclose(out.numpy(), fd, atol=1e-5)
