"""Small MJCF models shared by the tests (inline, as in MuJoCo Warp's tests)."""

import mujoco

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
