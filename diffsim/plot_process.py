"""The `diffsim sysid` command's plots, drawn by a second Python process that gets matplotlib ready
while the solve runs.

A whole `diffsim sysid` process on a small problem would spend about a second on its three PNGs:
importing matplotlib (~0.4 s), loading fonts, drawing. Imported in a thread of the solving process, matplotlib
holds the GIL that the solve's Python needs, and the solve slows by what the import saves
(`benchmarks/bench_startup.py`). `PlotProcess.start()` launches `python -m diffsim.plot_process` at
the command's start instead: on another core it imports matplotlib (not Warp) and draws each figure
once on a made-up result, then waits on its stdin. After the answer is printed, `draw(result, out)`
sends it the plot data (pickled plain types: signals, history, labels, std) and waits for the files,
which `diffsim.plot.sysid_plot_jobs` writes as `sysid_plots` does (temporary file, then rename), one
forked child per figure. On the arm test of `mujoco.sysid` the plots add 0.42 s to the whole process,
2.96 s against 2.54 s with `--no-plots`, where they added 0.55 s drawn in turn in a process that
imported Warp and ran its teardown (`benchmarks/bench_startup.py`).

Failures keep the command's behaviour: where the process cannot start or dies, the plots are drawn
in this process (and any error is raised here, with its traceback); an `OSError` / `ValueError`
writing a file comes back as its message.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import types

from .host import local_cores

__all__ = ["PlotProcess"]

# exit status of the plotting process for an error writing the plots (its message on stdout)
WRITE_FAILED = 3


class PlotProcess:
  """A process that draws one `diffsim.plot.sysid_plots` call; see the module docstring."""

  def __init__(self, proc: subprocess.Popen | None):
    self.proc = proc

  @classmethod
  def start(cls) -> "PlotProcess":
    """Starts the process (a `PlotProcess` that draws in this process where that fails)."""
    env = dict(os.environ, MPLBACKEND="Agg")
    try:
      proc = subprocess.Popen([sys.executable, "-m", "diffsim.plot_process"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    except OSError:
      proc = None
    return cls(proc)

  def draw(self, result, out: str) -> None:
    """Writes `result`'s plots into folder `out` (`diffsim.plot.sysid_plots`) and waits for them.

    Raises:
      OSError: a plot could not be written (the message of the error the plotting process met).
    """
    proc, self.proc = self.proc, None
    if proc is not None:
      try:
        _, err = proc.communicate(pickle.dumps((_plot_data(result), os.fspath(out))), timeout=600)
      except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.communicate()
      else:
        if proc.returncode == 0:
          return
        if proc.returncode == WRITE_FAILED:
          raise OSError(err.decode(errors="replace").strip())
    from . import plot  # the process did not start or died: draw here, where errors show their traceback

    plot.sysid_plots(result, out)

  def close(self) -> None:
    """Ends the process without drawing (the command stopped before its plots)."""
    proc, self.proc = self.proc, None
    if proc is not None:
      try:
        proc.communicate(b"", timeout=60)
      except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.communicate()


# what `plot.plot_signals` and `sysid_plots` read of a recording
_RECORDING_FIELDS = ("time", "qpos", "qvel", "sensordata", "sensor_mask", "source")


def _plot_data(result) -> types.SimpleNamespace:
  """What `sysid_plots` reads of a `SysIdResult`, in picklable types that unpickle without Warp."""
  sig = result.signals
  # the recordings as plain namespaces of what the plots read: a `diffsim.data.Recording` would
  # unpickle through `diffsim.data`, which imports Warp (0.2 s more start, 0.15 s more exit)
  recordings = [types.SimpleNamespace(**{k: getattr(rec, k) for k in _RECORDING_FIELDS}) for rec in sig.recordings]
  signals = types.SimpleNamespace(model=sig.model, recordings=recordings, before=sig.before, after=sig.after)
  return types.SimpleNamespace(signals=signals, history={"fun": result.history["fun"], "x": result.history["x"]},
                               labels=list(result.labels), theta_std=result.theta_std, x=result.x)


_WARM_MODEL = """<mujoco><worldbody><body><joint name="j" type="hinge"/><geom size="0.1"/></body></worldbody>
<sensor><jointpos joint="j"/></sensor></mujoco>"""


def _warm_up() -> None:
  """Imports what the plots need and draws each of `sysid_plots`' figures once on a small made-up
  result, into a temporary folder: a process's first figure of a kind costs about twice a later one
  (fonts, glyph caches, tick formatters, the PNG encoder), and this is the one that runs before the
  answer is ready."""
  import tempfile

  import mujoco
  import numpy as np

  from . import plot

  mjm = mujoco.MjModel.from_xml_string(_WARM_MODEL)
  t = np.linspace(0.0, 1.0, 50)
  col = t[:, None]
  rec = types.SimpleNamespace(time=t, qpos=col, qvel=col, sensordata=col, sensor_mask=None, source="warm-up")
  sim = {"qpos": col ** 2, "qvel": col ** 2, "sensordata": col ** 2}
  signals = types.SimpleNamespace(model=mjm, recordings=[rec], before=[sim], after=[sim])
  history = {"fun": np.geomspace(1e3, 1e-6, 8), "x": np.outer(t[:8], [1, 2])}
  result = types.SimpleNamespace(signals=signals, history=history, labels=["a", "b"], theta_std=np.array([0.1, 0.2]),
                                 x={"a": 1.0, "b": 2.0})
  with tempfile.TemporaryDirectory() as folder:
    plot.sysid_plots(result, folder)


def main() -> int:
  try:
    _warm_up()
  except Exception:  # noqa: BLE001  (the drawing below meets the same error, or the parent draws)
    pass
  payload = sys.stdin.buffer.read()
  if not payload:
    return 0
  result, out = pickle.loads(payload)
  from . import plot

  return _draw(plot.sysid_plot_jobs(result, out))


def _run(jobs, err) -> int:
  """Draws `jobs` in turn; an `OSError` / `ValueError` writing one goes to `err` as its message."""
  for _, draw in jobs:
    try:
      draw()
    except (OSError, ValueError) as e:
      print(e, file=err)
      return WRITE_FAILED
  return 0


def _draw(jobs) -> int:
  """Draws `jobs` (`plot.sysid_plot_jobs`, independent figures) side by side where the OS forks and
  more than one CPU is ours: each job but the first in a child forked from this warmed-up process
  (copy-on-write: matplotlib, fonts and glyph caches come ready), the first here. The solving
  process waits idle meanwhile, so the figures share its core and ours. Exit status: 0;
  `WRITE_FAILED` with a write error's message on stderr; 1 where a child died otherwise (the
  command then draws them itself, where the error shows its traceback)."""
  if len(jobs) < 2 or local_cores() < 2 or not hasattr(os, "fork"):
    return _run(jobs, sys.stderr)
  children = []
  try:
    for job in jobs[1:]:
      r, w = os.pipe()
      pid = os.fork()
      if pid == 0:  # the child: one figure, then out without running the parent's exit handlers
        os.close(r)
        status = 1
        try:
          with os.fdopen(w, "w") as err:
            status = _run([job], err)
        except BaseException:  # noqa: BLE001  (any other failure: the traceback, then status 1)
          import traceback

          traceback.print_exc()
          sys.stderr.flush()
        os._exit(status)
      os.close(w)
      children.append((pid, r))
    status = _run(jobs[:1], sys.stderr)
  finally:
    codes, messages = [], []
    for pid, r in children:
      with os.fdopen(r) as f:
        messages.append(f.read().strip())
      codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
  if any(c not in (0, WRITE_FAILED) for c in codes):
    return 1
  for c, msg in zip(codes, messages):
    if c == WRITE_FAILED and status == 0:
      print(msg, file=sys.stderr)
      status = WRITE_FAILED
  return status


if __name__ == "__main__":
  status = main()
  # the files are written and closed: skip the interpreter's teardown (matplotlib's, a tenth of a
  # second that the command would wait for)
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(status)
