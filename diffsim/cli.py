"""The `diffsim` command line: `diffsim <command> ...` (see `diffsim --help`).

Commands:
  sysid   identify model parameters from recorded trajectories (`diffsim.sysid.identify`).
  view    play a saved trajectory of many worlds in the browser (`diffsim.viewer`).

Each command is a `_add_<name>(subparsers)` function that registers its parser and sets
`func(args) -> exit code`; add new commands the same way.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import warnings

from .plot_process import PlotProcess

__all__ = ["main"]

_SYSID_EPILOG = """\
examples:
  diffsim sysid pendulum.xml run1.npz run2.npz --param body_mass:pole --param dof_damping:hinge --out out/
  diffsim sysid so101.xml rec.csv --param dof_damping:elbow_flex --bounds dof_damping:elbow_flex=0.1,5 \\
      --weight qvel=0.1 --shooting 50 --starts 4 --device cuda:0

  diffsim sysid robot.usda run1.npz --param body_mass:link1   # a UsdPhysics stage (pip install "diffsim[usd]")

  diffsim sysid so101.xml ~/.cache/huggingface/lerobot/me/so101_moves --episodes 0:10 --units degrees \
      --param dof_damping:elbow_flex --param dof_armature:elbow_flex --param actuator_gainprm:elbow_flex

Recorded data: .npz with time (T,), ctrl (T, nu) and qpos (T, nq) / qvel (T, nv) / sensordata
(T, nsensordata), or .csv with a header naming columns (time, ctrl:<actuator>, qpos:<joint>, ...);
see the docstring of diffsim.data. A folder with meta/info.json is a LeRobot dataset (v2.1 or
v3.0): observation.state gives qpos, action the position actuators' controls, by joint name; see
the docstring of diffsim.lerobot. Writes OUTDIR/params.json, OUTDIR/model.xml and PNG plots.
"""


def _pair(text: str, what: str):
  name, sep, value = text.rpartition("=")
  if not sep or not name:
    raise argparse.ArgumentTypeError(f"expected NAME=VALUE for {what}, got {text!r}")
  return name, value


def _bound(text: str):
  name, value = _pair(text, "--bounds")
  parts = value.split(",")
  if len(parts) != 2:
    raise argparse.ArgumentTypeError(f"expected NAME=LOWER,UPPER for --bounds (empty for none), got {text!r}")
  try:
    lo, hi = (float(p) if p.strip() else None for p in parts)
  except ValueError:
    raise argparse.ArgumentTypeError(f"bounds must be numbers: {text!r}") from None
  return name, (lo, hi)


def _weight(text: str):
  name, value = _pair(text, "--weight")
  try:
    return name, float(value)
  except ValueError:
    raise argparse.ArgumentTypeError(f"weight must be a number: {text!r}") from None


def _normalize_mode(args):
  """`identify`'s `normalize` from `--no-normalize` and `--normalize-per-recording`."""
  if args.no_normalize and args.normalize_per_recording:
    raise ValueError("--no-normalize and --normalize-per-recording contradict each other: give one")
  return "recording" if args.normalize_per_recording else not args.no_normalize


def parse_episodes(text: str):
  """`0:10` -> slice(0, 10); `3`, `0,2,5`, `0:10,12` -> a list of episode indices."""
  parts = [p.strip() for p in text.split(",") if p.strip()]
  out = []
  try:
    for part in parts:
      if ":" in part:
        a, _, b = part.partition(":")
        if not b.strip():
          if len(parts) > 1:
            raise argparse.ArgumentTypeError(f"an open range ({part}) must stand alone in --episodes {text!r}")
          return slice(int(a) if a.strip() else 0, None)
        out.extend(range(int(a) if a.strip() else 0, int(b)))
      else:
        out.append(int(part))
  except ValueError:
    raise argparse.ArgumentTypeError(f"--episodes takes episode indices and ranges such as 0:10, 3 or 0,2,5; got "
                                     f"{text!r}") from None
  if not out or min(out) < 0:
    raise argparse.ArgumentTypeError(f"--episodes {text!r} selects no episode (indices start at 0)")
  return out


def _add_sysid(sub) -> None:
  p = sub.add_parser(
    "sysid", help="identify model parameters from recorded trajectories",
    description="Identify MuJoCo model parameters that make the simulation reproduce recorded data "
                "(Levenberg-Marquardt on MJWarp rollouts, one world per trajectory).",
    epilog=_SYSID_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("model", metavar="MODEL",
                 help='MJCF model (.xml) or UsdPhysics stage (.usd, .usda, .usdc; pip install "diffsim[usd]"); its '
                      "values are the initial guess")
  p.add_argument("data", metavar="DATA", nargs="+",
                 help="recordings (.npz or .csv) or LeRobot dataset folders (with meta/info.json); all share the "
                      "parameters")
  p.add_argument("--param", "-p", dest="params", action="append", required=True, metavar="FIELD:ELEMENT",
                 help="parameter to identify, e.g. body_mass:ball, dof_damping:slide, opt.gravity (repeatable)")
  p.add_argument("--bounds", action="append", type=_bound, default=[], metavar="NAME=LO,HI",
                 help="bounds of a parameter (empty side: none); default (0, inf) for positive quantities")
  p.add_argument("--weight", action="append", type=_weight, default=[], metavar="KEY=W",
                 help="residual weight: qpos, qvel, sensordata, qpos:<joint>, qvel:<joint>, sensor:<name>")
  p.add_argument("--no-normalize", action="store_true",
                 help="do not divide each signal by its spread (weights then carry the units)")
  p.add_argument("--normalize-per-recording", action="store_true",
                 help="divide each recording's signals by their own norm, as mujoco.sysid does (every recording "
                      "weighs alike, however hard it was driven), not by each unit's spread over all of them")
  p.add_argument("--method", choices=("lm", "adam"), default="lm", help="Levenberg-Marquardt (default) or Adam")
  p.add_argument("--jacobian", choices=("auto", "forward", "directional", "finite_difference"), default="auto",
                 help="LM's residual Jacobian: step Jacobians propagated forward, or forward mode with a lane per "
                      "parameter (faster with few parameters, less precise on constrained models); auto (default): "
                      "directional while the trajectories meet no constraint row and converge fast, else forward, "
                      "taking directional's step where that lowers the cost further (recordings that reach "
                      "joint limits or make contact); where the adjoint covers the model (the analytic step's "
                      "Jacobians), forward from the start on a model that can make constraint rows, and back to "
                      "directional once the trajectories leave them, if it has no more columns than the step's "
                      "reverse passes. Where trajectories cross such switches, each checks the other's "
                      "convergence")
  p.add_argument("--maxiter", type=int, default=30, help="maximum iterations (default 30)")
  p.add_argument("--lr", type=float, default=None,
                 help="Adam step, relative to each parameter (default 0.05; options={'lr': ...})")
  p.add_argument("--shooting", type=int, default=None, metavar="K",
                 help="multiple shooting: restart from the measured state every K samples")
  p.add_argument("--starts", type=int, default=1, help="initial guesses solved in parallel worlds (default 1)")
  p.add_argument("--seed", type=int, default=0, help="seed of the random initial guesses")
  p.add_argument("--fit-qpos0", action="store_true",
                 help="also solve for each recording's initial position (noisy position data); unmeasured "
                      "initial velocities are always solved for")
  p.add_argument("--resample", action="store_true",
                 help="resample recordings whose sample times are not multiples of the model timestep")
  p.add_argument("--max-steps-per-sample", type=int, default=None, metavar="N",
                 help="most model steps between two samples (default 500; longer intervals are refused as "
                      "likely times in milliseconds)")
  p.add_argument("--episodes", type=parse_episodes, default=None, metavar="SPEC",
                 help="LeRobot datasets: the episodes to use, e.g. 0:10 (0 to 9), 3, 0,2,5 or 0:10,12 (default all)")
  p.add_argument("--units", choices=("degrees", "normalized"), default=None,
                 help="LeRobot datasets: units of the body joints, degrees (use_degrees, LeRobot's default from "
                      "0.4.4) or normalized (RANGE_M100_100, needs --calibration); default: detect, and say so")
  p.add_argument("--calibration", default=None, metavar="FILE",
                 help="LeRobot datasets: the arm's calibration, calibration/robots/<robot_type>/<id>.json")
  p.add_argument("--device", default=None, help="Warp device: cpu, cuda, cuda:N (default: cuda if available)")
  p.add_argument("--workers", type=int, default=None, metavar="N",
                 help='split the recordings between N Ray workers (pip install "diffsim[ray]"; default: one process)')
  p.add_argument("--address", default=None, metavar="HOST:PORT",
                 help="join the Ray cluster at HOST:PORT (`ray start --head` prints it) instead of a local one")
  p.add_argument("--out", "-o", default="out", metavar="OUTDIR", help="output folder (default out/)")
  p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
  p.add_argument("--video", action="store_true",
                 help="also write OUTDIR/replay.gif: each recording (up to 4) beside its replay with the initial "
                      "and the identified model (MuJoCo C, the recorded controls)")
  p.add_argument("--video-size", default="240x180", metavar="WxH", help="pixels per tile (default 240x180)")
  p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
  p.add_argument("--verbose", "-v", action="store_true", help="show Warp's initialization and kernel-loading logs")
  p.set_defaults(func=_run_sysid)


def _run_sysid(args) -> int:
  from . import data as _data

  if args.maxiter < 0 or args.starts < 1:
    print("diffsim sysid: error: --maxiter must be >= 0 and --starts >= 1", file=sys.stderr)
    return 2
  if args.lr is not None and args.method != "adam":
    print("diffsim sysid: error: --lr is Adam's step size; add --method adam, or drop --lr", file=sys.stderr)
    return 2
  datasets = [d for d in args.data if os.path.isdir(d)]
  lerobot_opts = [o for o, v in (("--episodes", args.episodes), ("--units", args.units),
                                 ("--calibration", args.calibration)) if v is not None]
  if lerobot_opts and not datasets:
    print(f"diffsim sysid: error: {', '.join(lerobot_opts)} select and convert LeRobot datasets, but no DATA is a "
          "dataset folder (one with meta/info.json)", file=sys.stderr)
    return 2
  if args.video:
    try:
      from .video import check_path, video_options

      os.makedirs(args.out, exist_ok=True)
      args.video_name, args.video_format = "replay", "gif"
      check_path(os.path.join(args.out, "replay.gif"))
      video_options(args, args.out)  # the size, checked before the solve
    except (ValueError, OSError, ImportError) as e:
      print(f"diffsim sysid: error: {e}", file=sys.stderr)
      return 2
  # the plots' process gets matplotlib ready on another core while this one imports and solves
  plotter = None if args.no_plots else PlotProcess.start()
  try:
    return _solve(args, plotter)
  finally:
    if plotter is not None:
      plotter.close()  # a run that ended before its plots


def _solve(args, plotter) -> int:
  """`diffsim sysid` from the solve on: identify, print the answer, write the plots (`plotter`)."""
  from . import data as _data
  from . import lerobot, sysid

  caught: list = []
  try:
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always", sysid.IdentifiabilityWarning)
      data, limit = [], args.max_steps_per_sample
      for item in args.data:
        if not os.path.isdir(item):
          data.append(item)
          continue
        if not lerobot.is_lerobot_dataset(item):
          raise _data.DataError(f"{item} is a folder but not a LeRobot dataset (no meta/info.json); give .npz or "
                                ".csv files, or a dataset's root folder")
        recs = lerobot.load_lerobot(item, args.model, episodes=args.episodes, units=args.units,
                                    calibration=args.calibration)
        data.extend(recs)
        if args.max_steps_per_sample is None:  # frame times come from fps: no millisecond mistake to guard against
          from .scene import load_mjmodel

          dt = float(load_mjmodel(args.model).opt.timestep)
          steps = max(int(round(float(max(r.time[1:] - r.time[:-1])) / dt)) for r in recs)
          limit = max(limit or _data.MAX_STEPS_PER_SAMPLE, steps)
      import warp as wp

      if not args.verbose:
        wp.config.log_level = wp.LOG_WARNING  # keep stdout for the summary: no init banner, no module logs
      res = sysid.identify(
        args.model, data, args.params, bounds=dict(args.bounds), weights=dict(args.weight),
        normalize=_normalize_mode(args), method=args.method, jacobian=args.jacobian, maxiter=args.maxiter,
        options=None if args.lr is None else {"lr": args.lr}, shooting=args.shooting,
        starts=args.starts, seed=args.seed, resample=args.resample,
        max_steps_per_sample=limit, fit_qpos0=args.fit_qpos0, device=args.device,
        out=args.out, plots=False, progress=not args.quiet, workers=args.workers, address=args.address)
  except (_data.DataError, ValueError, KeyError, TypeError, FileNotFoundError, IndexError,
          NotImplementedError, FloatingPointError, ImportError, ConnectionError) as e:
    msg = e.args[0] if isinstance(e, KeyError) and e.args else e
    for m in _data.group_messages(str(w.message) for w in caught
                                  if not issubclass(w.category, sysid.IdentifiabilityWarning)):
      print(f"warning: {m}", file=sys.stderr)  # what was assumed before the error (units, timing)
    print(f"diffsim sysid: error: {msg}", file=sys.stderr)
    return 2
  shown = [str(w.message) for w in caught if not issubclass(w.category, sysid.IdentifiabilityWarning)
           and not (res.save_error and res.save_error in str(w.message))]
  for m in _data.group_messages(shown):  # one line for what several recordings share
    print(f"warning: {m}", file=sys.stderr)
  for m in res.warnings:
    print(f"warning: {m}", file=sys.stderr)
  if res.save_error:
    print(res.summary(), flush=True)
    print(f"diffsim sysid: error: the solve finished (above) but writing {args.out} failed: {res.save_error}",
          file=sys.stderr)
    if res.save_error.startswith("model.xml not written"):  # params.json is there: its plots still help
      _write_plots(args, res, plotter)
    return 3
  wrote = os.path.join(args.out, "params.json")
  if args.video and res.signals is None:
    print("warning: no video: the solve kept no recordings to replay", file=sys.stderr)
  elif args.video:
    wrote += ", " + _replay_video(args, res)
  # the answer first: the plots (about a second of matplotlib for a small problem) come after it
  print(res.summary() + f"; wrote {wrote}", flush=True)
  if _write_plots(args, res, plotter):
    return 3
  if not res.success:  # why, and what to try (the summary says only that it did not converge)
    print(f"diffsim sysid: {res.message.split('; warning: ')[0]}", file=sys.stderr)
  return 0 if res.success else 1


def _write_plots(args, res, plotter) -> bool:
  """Draws OUTDIR's PNG plots (`diffsim.plot.sysid_plots`, by `plotter`) unless `--no-plots`; True
  where that failed (the error is printed)."""
  if args.no_plots or res.signals is None:
    return False
  try:
    plotter.draw(res, args.out)
  except (OSError, ValueError) as e:
    print(f"diffsim sysid: error: the solve finished (above) but writing its plots to {args.out} failed: {e}",
          file=sys.stderr)
    return True
  return False


def _replay_video(args, res) -> str:
  """Writes OUTDIR/replay.gif: per recording (up to 4), its recorded motion (where qpos was recorded) and
  the recorded controls replayed in MuJoCo C from its initial state with the initial and the identified
  model, at the recording's sample times. Returns the path."""
  import mujoco
  import numpy as np

  from .scene import Scene, load_mjmodel
  from .video import record, video_options

  path, size = video_options(args, args.out)
  initial = load_mjmodel(args.model)
  identified = mujoco.MjModel.from_xml_path(os.path.join(args.out, "model.xml"))
  recs = res.signals.recordings[:4]
  rows, labels = [], []
  for i, rec in enumerate(recs):
    replays = {"initial": initial, "identified": identified}
    if rec.qpos is not None:
      rows.append(rec.qpos)
      labels.append(f"recording {i}")
    for name, model in replays.items():
      rows.append(_replay(model, rec, res.initial_qpos[i], res.initial_qvel[i]))
      labels.append(f"{name} model, rec. {i}")
  nsample = min(len(r) for r in rows)
  qpos = np.stack([r[:nsample] for r in rows]).astype(np.float32)
  fps = 1.0 / float(np.median(np.diff(recs[0].time)))
  scene = Scene.from_xml(args.model, nworld=1, device=args.device)
  return record(scene, qpos, path, labels=labels, size=size, fps=fps, columns=len(rows) // len(recs))


def _replay(mjm, rec, qpos0, qvel0):
  """`(T, nq)` qpos at the recording's sample times: its controls held between samples, stepped in MuJoCo C."""
  import mujoco
  import numpy as np

  d = mujoco.MjData(mjm)
  d.qpos[:], d.qvel[:] = qpos0, qvel0
  mujoco.mj_forward(mjm, d)
  out = [d.qpos.copy()]
  t = rec.time[0]
  for k in range(1, len(rec.time)):
    if rec.ctrl is not None:
      d.ctrl[:] = rec.ctrl[k - 1]
    for _ in range(max(1, int(round((rec.time[k] - t) / mjm.opt.timestep)))):
      mujoco.mj_step(mjm, d)
    t = rec.time[k]
    out.append(d.qpos.copy())
  return np.array(out)


def _add_view(sub) -> None:
  p = sub.add_parser(
    "view", help="play a saved trajectory of many worlds in the browser",
    description="Serve a local web page that plays the worlds of a trajectory file (scrub time, play, show or hide "
                "worlds); needs pip install \"diffsim[view]\".",
    epilog="RESULT: an .npz of diffsim.viewer.save_trajectory, e.g. out/02_cartpole_swingup/trajectory.npz from "
           "tutorial 02.")
  p.add_argument("result", metavar="RESULT", help="trajectory file (.npz of diffsim.viewer.save_trajectory)")
  p.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1: this machine only)")
  p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0: a free one)")
  p.set_defaults(func=_run_view)


def _run_view(args) -> int:
  from .viewer import load_trajectory, serve

  try:
    mjm, qpos, dt, labels = load_trajectory(args.result)
    serve(mjm, qpos, dt, host=args.host, port=args.port, labels=labels)
  except (ValueError, OSError, ImportError) as e:
    print(f"diffsim view: error: {e}", file=sys.stderr)
    return 2
  return 0


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
    prog="diffsim", description="Differentiable MuJoCo Warp: system identification and trajectory optimization.")
  from . import __version__

  parser.add_argument("--version", action="version", version=f"diffsim {__version__}")
  sub = parser.add_subparsers(dest="command", metavar="COMMAND")
  _add_sysid(sub)
  _add_view(sub)
  return parser


# Collector thresholds for a whole `diffsim` process: importing Warp and MJWarp and loading their
# kernels make hundreds of thousands of long-lived objects, which the default (700, 10, 10) walks
# again and again, about a third of a small sysid's wall time (bench_startup.py).
_GC_THRESHOLD = (50_000, 20, 100)


def main(argv=None) -> int:
  """Runs the command line; returns the exit code (0 success, 1 not converged, 2 bad input, 3 solved but
  the results could not all be written).

  `argv=None` means this process is the command (the console script, `python -m diffsim`): the
  garbage collector then runs less often, and everything still alive at the end is frozen so the
  interpreter's exit does not walk it once more. An explicit `argv` (tests, embedding) leaves the
  collector as it is.
  """
  whole_process = argv is None
  if whole_process:
    gc.set_threshold(*_GC_THRESHOLD)
  try:
    parser = _parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
      parser.print_help()
      return 0 if argv is not None or len(sys.argv) > 1 else 2
    return args.func(args)
  finally:
    if whole_process:
      gc.freeze()


if __name__ == "__main__":
  sys.exit(main())
