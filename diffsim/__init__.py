"""diffsim: differentiable MuJoCo Warp rollouts for trajectory optimization and system identification.

The public names below are imported on first use (PEP 562), so `import diffsim` loads neither Warp nor
MuJoCo Warp (whose kernels take seconds to define); `diffsim.Scene`, `from diffsim import sysid`, ... load
what they need. The `TYPE_CHECKING` block lists every name for static tools, one per line.
"""

import importlib
import sys
import types
from typing import TYPE_CHECKING

__version__ = "0.1.0"

# submodules, and public names with the module that defines them
_SUBMODULES = ("adjoint", "cli", "data", "distributed", "gradcheck", "graph", "interop", "joints", "kernels", "lerobot",
               "losses", "optim", "params", "plot", "render", "scene", "step", "sysid", "trajopt", "usd", "video",
               "viewer")
_NAMES = {
  "check_gradients": "gradcheck",
  "Param": "params",
  "DivergenceError": "rollout",
  "GradientWarning": "rollout",
  "Camera": "render",
  "Frames": "render",
  "observe": "render",
  "render_trajectory": "render",
  "Rollout": "rollout",
  "Trajectory": "rollout",
  "check_switches": "rollout",
  "rollout": "rollout",
  "Scene": "scene",
  "SolverSettings": "scene",
  "UnknownNameError": "mjmodel",
  "asset_path": "scene",
  "set_deterministic": "scene",
  "FiniteDifferenceStep": "step",
  "TrajectoryProblem": "trajopt",
  "TrajectoryResult": "trajopt",
  "optimize_trajectory": "trajopt",
  "write_video": "video",
  "view": "viewer",
}
__all__ = [*_SUBMODULES, *_NAMES, "__version__"]


def __getattr__(name: str):
  if name in _SUBMODULES:
    value = importlib.import_module(f"diffsim.{name}")
  elif name in _NAMES:
    value = getattr(importlib.import_module(f"diffsim.{_NAMES[name]}"), name)
  else:
    raise AttributeError(f"module 'diffsim' has no attribute {name!r}")
  globals()[name] = value  # later lookups skip this function
  return value


def __dir__():
  return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
  def __setattr__(self, name, value):
    # importing the submodule diffsim.rollout binds it here; the public name is its function `rollout`
    if name in _NAMES and isinstance(value, types.ModuleType) and value.__name__ == f"diffsim.{name}":
      value = getattr(value, name)
    super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


if TYPE_CHECKING:
  from diffsim import data as data
  from diffsim import graph as graph
  from diffsim import distributed as distributed
  from diffsim import interop as interop
  from diffsim import joints as joints
  from diffsim import kernels as kernels
  from diffsim import losses as losses
  from diffsim import optim as optim
  from diffsim import sysid as sysid
  from diffsim import render as render
  from diffsim import usd as usd
  from diffsim import video as video
  from diffsim import viewer as viewer
  from diffsim.gradcheck import check_gradients as check_gradients
  from diffsim.params import Param as Param
  from diffsim.rollout import DivergenceError as DivergenceError
  from diffsim.rollout import GradientWarning as GradientWarning
  from diffsim.render import Camera as Camera
  from diffsim.render import Frames as Frames
  from diffsim.render import observe as observe
  from diffsim.render import render_trajectory as render_trajectory
  from diffsim.rollout import Rollout as Rollout
  from diffsim.rollout import Trajectory as Trajectory
  from diffsim.rollout import check_switches as check_switches
  from diffsim.rollout import rollout as rollout
  from diffsim.scene import Scene as Scene
  from diffsim.scene import SolverSettings as SolverSettings
  from diffsim.mjmodel import UnknownNameError as UnknownNameError
  from diffsim.scene import asset_path as asset_path
  from diffsim.scene import set_deterministic as set_deterministic
  from diffsim.step import FiniteDifferenceStep as FiniteDifferenceStep
  from diffsim.trajopt import TrajectoryProblem as TrajectoryProblem
  from diffsim.trajopt import TrajectoryResult as TrajectoryResult
  from diffsim.trajopt import optimize_trajectory as optimize_trajectory
  from diffsim.video import write_video as write_video
  from diffsim.viewer import view as view
