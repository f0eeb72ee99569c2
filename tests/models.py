"""Small MJCF models shared by the tests (inline, as in MuJoCo Warp's tests)."""

import mujoco
import numpy as np

import diffsim

# A hinge arm carrying a ball-joint pendulum, and a free body spinning in the air (no contacts).
BALL_FREE = """
<mujoco model="ball_free">
  <option timestep="0.005"/>
  <worldbody>
    <body name="arm" pos="0 0 1">
      <joint name="base" type="hinge" axis="0 0 1" damping="0.05"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="0.5" contype="0" conaffinity="0"/>
      <body name="bob" pos="0.3 0 0">
        <joint name="ball" type="ball" damping="0.02"/>
        <geom type="capsule" fromto="0 0 0 0.1 0 -0.3" size="0.03" mass="0.3" contype="0" conaffinity="0"/>
      </body>
    </body>
    <body name="floater" pos="0 1 1">
      <freejoint name="free"/>
      <geom type="box" size="0.1 0.05 0.02" mass="0.4" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="base" joint="base" gear="1"/>
    <motor name="spin" joint="free" gear="0 0 1 0.1 0 0.05"/>
  </actuator>
  <sensor>
    <framequat name="floater_quat" objtype="body" objname="floater"/>
    <framepos name="bob_pos" objtype="xbody" objname="bob"/>
  </sensor>
</mujoco>
"""

# A box pushed across a plane: sliding friction contacts.
SLIDING_BOX = """
<mujoco model="sliding_box">
  <option timestep="0.005"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1" friction="0.5"/>
    <body name="box" pos="0 0 0.04998">
      <freejoint name="box"/>
      <geom name="box" type="box" size="0.05 0.05 0.05" mass="1" friction="0.5"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="push" joint="box" gear="1 0 0 0 0 0"/>
  </actuator>
  <sensor>
    <framepos name="box_pos" objtype="body" objname="box"/>
  </sensor>
</mujoco>
"""


def so101_spec() -> mujoco.MjSpec:
  """The SO-101 arm with an end-effector position sensor."""
  spec = mujoco.MjSpec.from_file(diffsim.asset_path("so101", "so101_new_calib.xml"))
  spec.add_sensor(name="ee_pos", type=mujoco.mjtSensor.mjSENS_FRAMEPOS, objtype=mujoco.mjtObj.mjOBJ_SITE,
                  objname="gripperframe")
  return spec

# A ball pushed across a plane: one rolling contact.
ROLLING_BALL = """
<mujoco model="rolling_ball">
  <option timestep="0.005"/>
  <worldbody>
    <geom name="floor" type="plane" size="5 5 0.1" friction="1"/>
    <body name="ball" pos="0 0 0.04963">
      <freejoint name="ball"/>
      <geom name="ball" type="sphere" size="0.05" mass="1" friction="1"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="push" joint="ball" gear="1 0 0 0 0 0"/>
  </actuator>
  <sensor>
    <framepos name="ball_pos" objtype="body" objname="ball"/>
  </sensor>
</mujoco>
"""


# A pendulum with a motor, a joint-angle sensor and a tip-position sensor (3 values).
PENDULUM = """
<mujoco model="pendulum">
  <option timestep="0.01"/>
  <worldbody>
    <body name="pole">
      <joint name="hinge" type="hinge" axis="0 1 0" damping="0.05"/>
      <inertial pos="0 0 -0.4" mass="0.5" diaginertia="0.004 0.004 0.0005"/>
      <geom name="rod" type="capsule" fromto="0 0 0 0 0 -0.5" size="0.02" mass="0"/>
      <site name="tip" pos="0 0 -0.5"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="torque" joint="hinge"/>
  </actuator>
  <sensor>
    <jointpos name="angle" joint="hinge"/>
    <framepos name="tip_pos" objtype="site" objname="tip"/>
  </sensor>
</mujoco>
"""


# A pendulum with a joint limit and no other constraint: rows only while it presses on the limit
LIMITED_PENDULUM = """
<mujoco model="limited_pendulum">
  <compiler angle="radian"/>
  <option timestep="0.005" integrator="implicitfast"/>
  <worldbody>
    <body name="pole">
      <joint name="hinge" type="hinge" axis="0 1 0" range="-0.5 0.5" damping="0.02"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.4" size="0.02" mass="0.5" contype="0" conaffinity="0"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="torque" joint="hinge"/>
  </actuator>
  <sensor>
    <jointpos name="angle" joint="hinge"/>
  </sensor>
</mujoco>
"""


# Constraints without contacts: a four-bar-like loop closed by a `connect` equality, a hinge with a
# limit and a first-order (filter) actuator, so the state has an activation (na = 1).
CONSTRAINED = """
<mujoco model="constrained">
  <compiler angle="radian"/>
  <option timestep="0.005"/>
  <default><geom contype="0" conaffinity="0"/></default>
  <worldbody>
    <body name="a1" pos="0 0 1">
      <joint name="ja1" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.4"/>
      <body name="a2" pos="0.3 0 0">
        <joint name="ja2" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.02" mass="0.3"/>
      </body>
    </body>
    <body name="b1" pos="0.4 0 1">
      <joint name="jb1" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.02" mass="0.3"/>
    </body>
    <body name="arm" pos="0 0 2">
      <joint name="limited" type="hinge" axis="0 1 0" range="-0.5 0.5"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02" mass="0.3"/>
    </body>
  </worldbody>
  <equality>
    <connect body1="a2" body2="b1" anchor="0 0 -0.3"/>
  </equality>
  <actuator>
    <motor name="drive" joint="ja1"/>
    <general name="filtered" joint="limited" dyntype="filter" dynprm="0.05" gainprm="1"/>
  </actuator>
  <sensor>
    <jointpos name="jb1" joint="jb1"/>
    <jointlimitfrc name="limit_force" joint="limited"/>
  </sensor>
</mujoco>
"""


# Every smooth feature the analytic adjoint covers in one contact-free model: hinge, ball, slide and
# free joints, springs, dampers, armature; a motor, a position servo, filter and integrator
# activations, a clamped control; body, site and joint sensors.
SMOOTH = """
<mujoco model="smooth">
  <option timestep="0.005"/>
  <default><geom contype="0" conaffinity="0"/></default>
  <worldbody>
    <body name="arm" pos="0 0 1">
      <joint name="base" type="hinge" axis="0 0 1" damping="0.05" armature="0.01"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="0.5"/>
      <body name="bob" pos="0.3 0 0">
        <joint name="ball" type="ball" damping="0.02"/>
        <geom type="capsule" fromto="0 0 0 0.1 0 -0.3" size="0.03" mass="0.3"/>
        <body name="tip" pos="0.1 0 -0.3">
          <joint name="h2" type="hinge" axis="1 0 0" stiffness="2" damping="0.1"/>
          <joint name="s2" type="slide" axis="0 1 0" stiffness="5" damping="0.2"/>
          <geom type="sphere" size="0.04" mass="0.2" pos="0 0.05 -0.05"/>
          <site name="tip" pos="0 0.05 -0.1"/>
        </body>
      </body>
    </body>
    <body name="floater" pos="0 1 1">
      <freejoint name="free"/>
      <geom type="box" size="0.1 0.05 0.02" mass="0.4"/>
      <body name="flap" pos="0.1 0 0">
        <joint name="fh" type="hinge" axis="0 1 0" damping="0.01"/>
        <geom type="box" size="0.05 0.05 0.01" pos="0.05 0 0" mass="0.1"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="base" joint="base" gear="1.5"/>
    <position name="pos" joint="h2" kp="3" kv="0.2"/>
    <general name="filt" joint="s2" dyntype="filter" dynprm="0.05" gainprm="2" biastype="affine" biasprm="0 -1 -0.1"/>
    <general name="integ" joint="fh" dyntype="integrator" gainprm="0.3" ctrllimited="true" ctrlrange="-1 1"/>
    <motor name="spin" joint="free" gear="0 0 1 0.1 0 0.05"/>
  </actuator>
  <sensor>
    <jointpos name="h2" joint="h2"/>
    <jointvel name="s2" joint="s2"/>
    <framepos name="tip_pos" objtype="site" objname="tip"/>
    <framequat name="floater_quat" objtype="body" objname="floater"/>
    <framelinvel name="tip_vel" objtype="site" objname="tip"/>
    <frameangvel name="bob_angvel" objtype="xbody" objname="bob"/>
    <actuatorfrc name="pos_frc" actuator="pos"/>
    <subtreecom name="arm_com" body="arm"/>
  </sensor>
</mujoco>
"""

# Joint limits that hold (a motor and gravity press both joints into them) and dof friction.
LIMITED = """
<mujoco model="limited">
  <compiler angle="radian"/>
  <option timestep="0.005"/>
  <default><geom contype="0" conaffinity="0"/></default>
  <worldbody>
    <body name="link" pos="0 0 1">
      <joint name="swing" type="hinge" axis="0 1 0" range="-0.4 0.3" frictionloss="0.05" damping="0.02"/>
      <geom type="capsule" fromto="0 0 0 0.4 0 0" size="0.03" mass="0.6"/>
      <body name="slider" pos="0.4 0 0">
        <joint name="slide" type="slide" axis="1 0 0" range="-0.05 0.1" frictionloss="0.2"/>
        <geom type="box" size="0.05 0.05 0.05" mass="0.3"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="swing" joint="swing" gear="1" ctrlrange="-2 2"/>
    <motor name="slide" joint="slide" gear="1" ctrlrange="-3 3"/>
  </actuator>
</mujoco>
"""

# Joint equalities: a hinge coupled to another by a polynomial, a slide held at an offset.
COUPLED = """
<mujoco model="coupled">
  <compiler angle="radian"/>
  <option timestep="0.005"/>
  <default><geom contype="0" conaffinity="0"/></default>
  <worldbody>
    <body name="a" pos="0 0 1">
      <joint name="a" type="hinge" axis="0 1 0" damping="0.05"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="0.5"/>
    </body>
    <body name="b" pos="0.5 0 1">
      <joint name="b" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.2 0 0.1" size="0.03" mass="0.3"/>
      <body name="c" pos="0.2 0 0.1">
        <joint name="c" type="slide" axis="1 0 0"/>
        <geom type="box" size="0.04 0.04 0.04" mass="0.2"/>
      </body>
    </body>
  </worldbody>
  <equality>
    <joint joint1="b" joint2="a" polycoef="0.1 0.8 0.3 0 0"/>
    <joint joint1="c" polycoef="0.05 0 0 0 0"/>
  </equality>
  <actuator>
    <motor name="a" joint="a"/>
    <motor name="c" joint="c"/>
  </actuator>
</mujoco>
"""

# SMOOTH without its free body, integrated with implicitfast (velocity derivatives of the dampers and
# of the servos' kv, integrated implicitly).
IMPLICITFAST = (SMOOTH.replace('<option timestep="0.005"/>', '<option timestep="0.005" integrator="implicitfast"/>')
                .replace(SMOOTH[SMOOTH.index('    <body name="floater"'):SMOOTH.index('  </worldbody>')], "")
                .replace('    <motor name="spin" joint="free" gear="0 0 1 0.1 0 0.05"/>\n', "")
                .replace('    <general name="integ" joint="fh" dyntype="integrator" gainprm="0.3" ctrllimited="true" '
                         'ctrlrange="-1 1"/>\n', "")
                .replace('    <framequat name="floater_quat" objtype="body" objname="floater"/>\n', ""))

# SMOOTH integrated with implicitfast, plus a tumbling free body with a welded fin (a tree of one free
# joint: implicitfast integrates its gyroscopic forces implicitly) under damping and a motor.
IMPLICITFAST_FREE = (SMOOTH.replace('<option timestep="0.005"/>',
                                   '<option timestep="0.005" integrator="implicitfast"/>')
                     .replace('  </worldbody>', '''    <body name="tumbler" pos="1 0 1" euler="0.2 0.4 0">
      <joint name="tumble" type="free" damping="0.02"/>
      <geom type="box" size="0.12 0.05 0.02" mass="0.5"/>
      <body name="fin" pos="0.08 0.04 0.02" euler="0.5 0 0.3">
        <geom type="box" size="0.04 0.03 0.01" mass="0.15"/>
      </body>
    </body>
  </worldbody>''')
                     .replace('  </actuator>',
                              '    <motor name="twist" joint="tumble" gear="0.1 0 0.05 0.2 0.1 0"/>\n  </actuator>')
                     .replace('  </sensor>', '    <framequat name="tumbler_quat" objtype="body" objname="tumbler"/>\n'
                              '    <frameangvel name="fin_angvel" objtype="xbody" objname="fin"/>\n  </sensor>'))


# -- inputs of the gradient checks -----------------------------------------------------------------
# tests/test_gradients.py checks them; benchmarks/bench_gradients.py stores the errors they measure
# (the README's "Gradient quality" table): one definition, so the table is the tests' own cases.


def _cartpole_inputs(mjm, nstep):
  rng = np.random.default_rng(0 if nstep == 100 else 7)
  if nstep == 100:
    params = [diffsim.Param("body_mass", "pole"), diffsim.Param("dof_damping", "hinge"),
              diffsim.Param("opt.gravity", components=[2])]
    return dict(ctrl=0.5 * rng.standard_normal((100, 1)), qpos0=[0.1, 0.3], qvel0=[0.0, 0.5], params=params)
  return dict(ctrl=0.5 * rng.standard_normal((nstep, 1)), qpos0=[0.1, 0.3], wrt=("ctrl", "qpos0", "qvel0"))


def _ball_free_inputs(mjm, nstep):
  rng = np.random.default_rng(1)
  qpos0 = mjm.qpos0.copy()
  qpos0[1:5] = np.array([0.9, 0.2, 0.3, 0.1]) / np.linalg.norm([0.9, 0.2, 0.3, 0.1])
  qvel0 = 0.5 * rng.standard_normal(mjm.nv)
  qvel0[7:10] = [1.0, 3.0, -2.0]  # spin the free body
  params = [diffsim.Param("body_mass", "bob"), diffsim.Param("dof_damping", "ball")]
  return dict(ctrl=0.3 * rng.standard_normal((nstep, mjm.nu)), qpos0=qpos0, qvel0=qvel0, params=params)


def _rolling_ball_inputs(mjm, nstep):
  rng = np.random.default_rng(2)
  params = [diffsim.Param("body_mass", "ball"), diffsim.Param("dof_damping", "ball")]
  return dict(ctrl=2.0 + 0.5 * rng.standard_normal((nstep, 1)), qvel0=[0.3, 0, 0, 0, 6.0, 0], params=params)


def _so101_inputs(mjm, nstep):
  nu = mjm.nu
  if nstep == 40:
    rng = np.random.default_rng(0)
    ctrl = np.tile(0.3 * rng.standard_normal(nu), (40, 1)) + 0.05 * rng.standard_normal((40, nu))
    params = [diffsim.Param("dof_damping", "elbow_flex"), diffsim.Param("dof_armature", "shoulder_lift"),
              diffsim.Param("actuator_gainprm", "elbow_flex")]
    return dict(ctrl=ctrl, params=params)
  rng = np.random.default_rng(7)
  rng.standard_normal((300, 1))  # the long-horizon cart-pole's draw comes first from the same generator
  ctrl = np.tile(0.3 * rng.standard_normal(nu), (nstep, 1)) + 0.05 * rng.standard_normal((nstep, nu))
  return dict(ctrl=ctrl, params=[diffsim.Param("dof_damping", "elbow_flex")], wrt=("qvel0", "params"))


# case: (model fixture, steps, inputs)
GRADIENT_CASES = {
  "cartpole_100": ("cartpole", 100, _cartpole_inputs),
  "cartpole_300": ("cartpole", 300, _cartpole_inputs),
  "ball_free_60": ("ball_free", 60, _ball_free_inputs),
  "rolling_ball_60": ("rolling_ball", 60, _rolling_ball_inputs),
  "so101_40": ("so101", 40, _so101_inputs),
  "so101_300": ("so101", 300, _so101_inputs),
}


def gradient_inputs(case: str, scene, nstep: int | None = None) -> dict:
  """`check_gradients`' keyword arguments (`ctrl` among them) of gradient check `case` on `scene` (its
  model), at the case's steps or `nstep`."""
  _, steps, inputs = GRADIENT_CASES[case]
  return inputs(scene.mjm, steps if nstep is None else nstep)
