"""Start-up: `import diffsim` and a whole `diffsim sysid` process on a small problem, warm and cold kernel cache.

  python -m benchmarks.bench_startup [--repeats 3]

The problem (issue 15): a one-parameter spring-mass (slide joint, damping 0.3 -> 0.5), 500 samples of
2 ms, identified by `diffsim sysid` as a fresh process (Python start, imports, Warp start, loading
the cached kernels, the solve, params.json, model.xml and plots). The kernel cache is warmed by one
untimed run first, and diffsim's modules are byte-compiled (`compileall`) as a first run leaves them.
Each row is the median of `--repeats` fresh processes; the import breakdown of the heavy dependencies (`python -X importtime`) says where a run's start goes. One more run, with
`WARP_CACHE_PATH` at an empty folder, is a first run on a new machine: Warp compiles every kernel the
command needs (MJWarp's included).

Issue 36's rows: `mujoco.sysid`'s own two test problems (`benchmarks/sysid_tests.py`: the arm's 5
armatures from 0.01, 999 samples; the spring-mass's mass from 2.0, 1,499 samples) as whole
`python -m diffsim sysid` processes with the defaults (plots included, and `--no-plots`), beside
`mujoco.sysid`'s API call on the same problem in a warm process (what its test runs) and the upstream
floor: a process that only imports Warp and MuJoCo Warp and exits as the command does
(`python -c "import gc, warp, mujoco_warp; gc.freeze()"`), which every diffsim command pays before its
own work.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

MODEL = """
<mujoco model="spring_mass">
  <option timestep="0.002"/>
  <worldbody>
    <body name="mass">
      <joint name="slide" type="slide" axis="1 0 0" stiffness="20" damping="0.3"/>
      <geom type="sphere" size="0.05" mass="1"/>
    </body>
  </worldbody>
  <actuator>
    <motor name="force" joint="slide"/>
  </actuator>
</mujoco>
"""
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env() -> dict:
  return dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), MPLBACKEND="Agg")


def _wall(cmd: list[str], cwd: str, **env) -> float:
  t0 = time.perf_counter()
  p = subprocess.run(cmd, cwd=cwd, env={**_env(), **env}, capture_output=True, text=True, timeout=900)
  wall = time.perf_counter() - t0
  if p.returncode != 0:
    raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
  return wall


def _imports(module: str) -> float:
  """Cumulative import time of `module` in a fresh process, s."""
  p = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], env=_env(), capture_output=True,
                     text=True, timeout=300)
  for line in p.stderr.splitlines()[::-1]:
    parts = line.split("|")
    if len(parts) == 3 and parts[2].strip() == module:
      return int(parts[1]) * 1e-6
  return float("nan")


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--device", default="cpu")
  parser.add_argument("--nstep", default=None, help=argparse.SUPPRESS)  # run.py's common options
  parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--quick", action="store_true")
  args = parser.parse_args(argv)
  repeats = 1 if args.quick else args.repeats
  sys.path.insert(0, ROOT)
  from diffsim import data as D

  with tempfile.TemporaryDirectory() as tmp:
    with open(os.path.join(tmp, "sm.xml"), "w") as f:
      f.write(MODEL)
    t = np.arange(500) * 0.002
    D.save_npz(os.path.join(tmp, "sm.npz"), D.simulate(MODEL.replace('damping="0.3"', 'damping="0.5"'),
                                                       np.sin(2 * np.pi * 1.3 * t)[:, None], qpos0=[0.1]))
    cli = [sys.executable, "-m", "diffsim", "sysid", "sm.xml", "sm.npz", "--param", "dof_damping:slide",
           "--out", "o", "--quiet", "--device", args.device]
    # diffsim's bytecode, as Python writes it on a first run (this project's machines set
    # PYTHONDONTWRITEBYTECODE; the installed packages come byte-compiled from pip)
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(ROOT, "diffsim")], check=True,
                   capture_output=True, timeout=300)
    _wall(cli, tmp)  # warm the kernel cache
    rows = []
    for what, cmd in (("python -c pass", [sys.executable, "-c", "pass"]),
                      ("import diffsim", [sys.executable, "-c", "import diffsim"]),
                      ("diffsim sysid (spring-mass, 500 samples)", cli),
                      ("diffsim sysid --no-plots", cli + ["--no-plots"])):
      walls = [_wall(cmd, tmp) for _ in range(repeats)]
      rows.append({"what": what, "wall_s": float(np.median(walls)), "repeats": repeats})
    rows += _test_problems(tmp, args.device, repeats)
    if not args.quick:
      # the first run on a new machine: an empty kernel cache, every kernel the command needs compiled
      with tempfile.TemporaryDirectory() as cache:
        rows.append({"what": "diffsim sysid --no-plots, cold kernel cache (compiles)", "repeats": 1,
                     "wall_s": _wall(cli + ["--no-plots"], tmp, WARP_CACHE_PATH=cache)})
  rows.append({"what": "imports (-X importtime)", "wall_s": None,
               "imports_s": {m: _imports(m) for m in ("numpy", "mujoco", "warp", "mujoco_warp", "matplotlib.figure",
                                                      "diffsim.sysid")}})
  print(table(rows))
  return rows


def _test_problems(tmp: str, device: str, repeats: int) -> list[dict]:
  """Whole `diffsim sysid` processes on `mujoco.sysid`'s test problems, beside the upstream import
  floor and `mujoco.sysid`'s warm API call (see the module docstring)."""
  from . import sysid_tests as T

  # the imports, and the exit as the command makes it (gc.freeze: no collection of what is alive)
  floor = [sys.executable, "-c", "import gc, warp, mujoco_warp; gc.freeze()"]
  rows = [{"what": "python -c 'import warp, mujoco_warp' (upstream floor)", "repeats": repeats,
           "wall_s": float(np.median([_wall(floor, tmp) for _ in range(repeats)]))}]
  for name in ("arm", "spring-mass"):
    data = T.load(name)
    cmd = [sys.executable, "-m", "diffsim", "sysid", *T.write_cli_inputs(name, tmp, data), "--out", f"o_{name}",
           "--quiet", "--device", device]
    _wall(cmd, tmp)  # warm the kernel cache for this model
    T.run_mujoco_sysid(name, data)  # mujoco.sysid's first call in this process
    for what, c in ((f"diffsim sysid ({name}, mujoco.sysid's test)", cmd), ("  --no-plots", cmd + ["--no-plots"])):
      walls = [_wall(c, tmp) for _ in range(repeats)]
      rows.append({"what": what, "wall_s": float(np.median(walls)), "repeats": repeats, "problem": name})
    with open(os.path.join(tmp, f"o_{name}", "params.json")) as f:
      rows[-2]["rel_error"] = T.rel_error(name, _theta(json.load(f), T.PROBLEMS[name].params))
    walls = [T.run_mujoco_sysid(name, data)["wall"] for _ in range(max(repeats, 3))]
    rows.append({"what": f"  mujoco.sysid API call ({name}, warm process)", "wall_s": float(np.median(walls)),
                 "repeats": max(repeats, 3), "problem": name})
  return rows


def _theta(params: dict, names) -> list[float]:
  """The identified values of `names` from a params.json."""
  return [float(np.ravel(params[n]["value"])[0]) for n in names]


def table(rows: list[dict]) -> str:
  lines = ["| process | wall time (s) |", "|---|---|"]
  for r in rows:
    if r["wall_s"] is not None:
      err = f", max rel. error {r['rel_error']:.1e}" if "rel_error" in r else ""
      lines.append(f"| {r['what']} | {r['wall_s']:.2f} (median of {r['repeats']}{err}) |")
    else:
      parts = ", ".join(f"`{m}` {s:.2f}" for m, s in r["imports_s"].items())
      lines.append(f"| {r['what']}, each in a fresh process | {parts} |")
  return "\n".join(lines)


if __name__ == "__main__":
  main()
