"""PNG plots (matplotlib, Agg canvas: never opens a window, never touches pyplot's global state).

`figure()` and `save_png()` are shared helpers; `sysid_plots(result, out)` writes the system
identification plots: measured vs simulated signals before and after, cost per iteration, and
parameter traces.
"""

from __future__ import annotations

import functools
import os
from typing import Callable

import mujoco
import numpy as np

from .atomic import atomic_write


# joint types whose qpos is the joint coordinate (mujoco's enum; `diffsim.joints` would import Warp)
HINGE, SLIDE = int(mujoco.mjtJoint.mjJNT_HINGE), int(mujoco.mjtJoint.mjJNT_SLIDE)

__all__ = ["figure", "save_png", "sysid_plots", "sysid_plot_jobs", "plot_signals", "plot_cost", "plot_params"]


def figure(nrows: int = 1, ncols: int = 1, *, width: float = 8.0, row_height: float = 2.2, sharex: bool = True):
  """A `(Figure, axes array)` on an Agg canvas, `axes` shaped `(nrows, ncols)`."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure

  height = max(2.5, row_height * nrows)
  fig = Figure(figsize=(width, height))
  FigureCanvasAgg(fig)
  axes = fig.subplots(nrows, ncols, sharex=sharex, squeeze=False)
  # fixed margins (inches: tick labels, axis labels, a title) instead of a layout engine, which costs
  # about as much as drawing the figure (bench_startup.py)
  # few ticks: matplotlib builds an artist per tick, about half of a small figure's drawing time
  from matplotlib.ticker import MaxNLocator

  for ax in axes.flat:
    ax.yaxis.set_major_locator(MaxNLocator(nbins=4))
  axes[0, 0].xaxis.set_major_locator(MaxNLocator(nbins=6))
  if sharex:  # rows above the bottom one show no x axis (and make no tick artists)
    for ax in axes[:-1].flat:
      ax.xaxis.set_visible(False)
  fig.subplots_adjust(left=0.85 / width, right=1 - 0.15 / width, bottom=0.5 / height, top=1 - 0.65 / height,
                      hspace=0.25 if sharex else 0.45, wspace=0.3)
  return fig, axes


def save_png(fig, path, *, dpi: int = 110) -> str:
  """Saves `fig` as PNG through a temporary file and a rename (an existing file survives a failure)."""
  atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=dpi))
  return os.fspath(path)


def _channels(mjm, rec, max_channels: int):
  """`(kind, column, label)` of measured scalar signals worth plotting, at most `max_channels`."""
  out = []
  if rec.qpos is not None:
    for j in range(mjm.njnt):
      if int(mjm.jnt_type[j]) in (HINGE, SLIDE):  # qpos is the joint coordinate
        name = mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_JOINT, j) or f"joint {j}"
        unit = "rad" if int(mjm.jnt_type[j]) == HINGE else "m"
        out.append(("qpos", int(mjm.jnt_qposadr[j]), f"qpos {name} ({unit})"))
  if rec.qvel is not None and len(out) < max_channels:
    for j in range(mjm.njnt):
      if int(mjm.jnt_type[j]) in (HINGE, SLIDE):
        name = mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_JOINT, j) or f"joint {j}"
        out.append(("qvel", int(mjm.jnt_dofadr[j]), f"qvel {name}"))
  if rec.sensordata is not None:
    mask = rec.sensor_mask if rec.sensor_mask is not None else np.ones(mjm.nsensordata, bool)
    for s in range(mjm.nsensor):
      name = mujoco.mj_id2name(mjm, mujoco.mjtObj.mjOBJ_SENSOR, s) or f"sensor {s}"
      for i in range(int(mjm.sensor_dim[s])):
        col = int(mjm.sensor_adr[s]) + i
        if mask[col]:
          out.append(("sensordata", col, f"{name}" + (f"[{i}]" if mjm.sensor_dim[s] > 1 else "")))
  return out[:max_channels]


def plot_signals(path, mjm, rec, before: dict, after: dict, *, title: str = "", max_channels: int = 8) -> str:
  """Measured vs simulated (initial guess and identified) signals of one recording.

  Args:
    path: PNG path.
    mjm: the model (for names).
    rec: the `diffsim.data.Recording`.
    before, after: simulated `{kind: (T, columns)}` at the recording's rows.
  """
  chans = _channels(mjm, rec, max_channels)
  fig, axes = figure(max(len(chans), 1), 1)
  t = rec.time - rec.time[0]
  for ax, (kind, col, label) in zip(axes[:, 0], chans):
    ax.plot(t, getattr(rec, kind)[:, col], ".", color="k", ms=2.5, label="measured")
    ax.plot(t, before[kind][:, col], "-", color="tab:red", lw=1, alpha=0.8, label="initial guess")
    ax.plot(t, after[kind][:, col], "-", color="tab:blue", lw=1.2, label="identified")
    ax.set_ylabel(label, fontsize=8)
    ax.grid(alpha=0.3)
  axes[0, 0].legend(fontsize=7, loc="upper right", ncols=3)
  axes[-1, 0].set_xlabel("time (s)")
  if title:
    fig.suptitle(title, fontsize=10)
  return save_png(fig, path)


def plot_cost(path, fun: np.ndarray, *, title: str = "cost per iteration") -> str:
  """Cost (log scale) per iteration."""
  fig, axes = figure(1, 1, row_height=3.0)
  ax = axes[0, 0]
  f = np.asarray(fun, dtype=np.float64)
  ax.semilogy(np.arange(f.size), np.where(f > 0, f, np.nan), "o-", ms=3)
  ax.set_xlabel("iteration")
  ax.set_ylabel("cost 0.5 |r|^2")
  ax.set_title(title, fontsize=10)
  ax.grid(alpha=0.3, which="both")
  return save_png(fig, path)


def plot_params(path, x: np.ndarray, labels, *, std: np.ndarray | None = None, truth: np.ndarray | None = None) -> str:
  """Trace of each scalar parameter over the iterations (one panel each, at most 12)."""
  x = np.atleast_2d(np.asarray(x, dtype=np.float64))
  n = min(x.shape[1], 12)
  fig, axes = figure(n, 1, row_height=1.6)
  it = np.arange(x.shape[0])
  for i in range(n):
    ax = axes[i, 0]
    ax.plot(it, x[:, i], "o-", ms=3, color="tab:blue")
    if std is not None and np.isfinite(std[i]):
      ax.fill_between(it[-1:] + np.array([-0.3, 0.3]), x[-1, i] - 2 * std[i], x[-1, i] + 2 * std[i],
                      color="tab:blue", alpha=0.25, lw=0, label="±2 std")
    if truth is not None and np.isfinite(truth[i]):
      ax.axhline(truth[i], color="k", ls="--", lw=1, label="truth")
    ax.set_ylabel(labels[i], fontsize=7)
    ax.grid(alpha=0.3)
  axes[-1, 0].set_xlabel("iteration")
  return save_png(fig, path)


MAX_SIGNAL_PLOTS = 3  # recordings whose signals sysid_plots draws, at most
# every file sysid_plots can write (SysIdResult.save removes an earlier run's that a later one did not redraw)
PLOT_FILES = ("signals.png", *(f"signals_{i}.png" for i in range(1, MAX_SIGNAL_PLOTS)), "cost.png", "params.png")


def sysid_plots(result, out, *, max_recordings: int = MAX_SIGNAL_PLOTS, truth: dict | None = None) -> dict[str, str]:
  """Writes `signals[_i].png`, `cost.png` and `params.png` for a `SysIdResult` into folder `out`.

  Args:
    result: a `diffsim.sysid.SysIdResult` (its `signals`, `history`, `labels`, `theta_std`, `x`).
    out: folder.
    max_recordings: plot the signals of at most this many recordings (at most `MAX_SIGNAL_PLOTS`).
    truth: `{name: value}` reference values drawn in `params.png`.
  """
  return {key: draw() for key, draw in sysid_plot_jobs(result, out, max_recordings=max_recordings, truth=truth)}


def sysid_plot_jobs(result, out, *, max_recordings: int = MAX_SIGNAL_PLOTS,
                    truth: dict | None = None) -> list[tuple[str, Callable[[], str]]]:
  """`sysid_plots`' figures as `(key, draw)` pairs, each `draw()` writing one PNG and returning its
  path: independent of each other, so that `diffsim.plot_process` can draw them side by side."""
  sig = result.signals
  jobs = []
  for i, rec in enumerate(sig.recordings[:min(max_recordings, MAX_SIGNAL_PLOTS)]):
    name = "signals.png" if i == 0 else f"signals_{i}.png"
    jobs.append((f"signals{'' if i == 0 else '_' + str(i)}", functools.partial(
      plot_signals, os.path.join(out, name), sig.model, rec, sig.before[i], sig.after[i],
      title=f"{rec.source}: measured vs simulated")))
  jobs.append(("cost", functools.partial(plot_cost, os.path.join(out, "cost.png"), result.history["fun"])))
  ref = None
  if truth:
    ref = np.concatenate([np.atleast_1d(np.asarray(truth.get(name, np.full(np.size(v), np.nan)), float))
                          for name, v in result.x.items()])
  jobs.append(("params_plot", functools.partial(plot_params, os.path.join(out, "params.png"), result.history["x"],
                                                result.labels, std=result.theta_std, truth=ref)))
  return jobs
