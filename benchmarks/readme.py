"""The README's measured figures, rendered from the stored results in `benchmarks/results/`.

Each generated block of README.md sits between two HTML comments,

  <!-- begin generated: NAME (...) -->
  ...
  <!-- end generated: NAME -->

and is rewritten whole from the JSON files named in `BLOCKS`; the rest of the README is prose that
people edit. Blocks:
  - `gradients`: the "Gradient quality" table, from `gradients_cpu.json` (`bench_gradients.py`) and
    the humanoid row of `contact_gradients_cpu.json` (`bench_contact_gradients.py`);
  - `adjoint`: the analytic adjoint's cost table, from `adjoint_cpu.json` (`bench_adjoint.py`);
  - `distributed`: 1 vs 2 Ray workers, from `distributed_cpu.json` (`bench_distributed.py`);
  - `benchmarks`: the "Benchmarks" table, from `cpu.json` (`python -m benchmarks.run`, each section
    with the command that produced it);
  - `tolerance`: the solver tolerance's table, from `tolerance_cpu.json` (`bench_tolerance.py`);
  - `forward`: diffsim's forward vs raw `mjw.step` as written, from `forward_cpu.json` (`bench_forward.py`);
  - `startup`: the "Start-up" paragraph, from `cpu.json`'s startup section (`bench_startup.py`);
  - `sysid_tests`: `mujoco.sysid`'s test problems in both tools, from `sysid_tests_cpu.json`
    (`bench_sysid.py --tests`);
  - `render`: diffsim's batched ray tracer vs `mujoco.Renderer`, from `render_cpu.json` (`bench_render.py`).

Run `python -m benchmarks.readme` after storing new results to update README.md;
`python -m benchmarks.readme --check` exits 1, printing the difference, when README.md disagrees
with the stored results (`tests/test_readme.py` runs that check).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
README = os.path.join(ROOT, "README.md")


def _load(results: str, name: str):
  with open(os.path.join(results, name)) as f:
    return json.load(f)


def _g(x: float) -> str:
  """Two significant digits, without an exponent below 1,000: 98.9 -> "99", 14136 -> "1.4e4"."""
  if x == 0:
    return "0"
  if abs(x) >= 1000 or abs(x) < 0.01:
    return sci(x)
  s = f"{float(f'{x:.2g}'):f}".rstrip("0").rstrip(".")
  return s


def sci(x: float, digits: int = 1) -> str:
  """Scientific, exponent without padding: 2.8e-07 -> "2.8e-7"."""
  m, e = f"{x:.{digits}e}".split("e")
  return f"{m}e{int(e)}"


def _f(x: float, digits: int = 2) -> str:
  return f"{x:.{digits}f}"


def _span(vals, fmt=_f) -> str:
  """`lo-hi` of the values as formatted (`lo..hi` for exponents; one value where both read the same)."""
  lo, hi = fmt(min(vals)), fmt(max(vals))
  return lo if lo == hi else f"{lo}{'..' if 'e' in lo + hi else '-'}{hi}"


def _cmd(argv: list[str], module: str = "benchmarks.run") -> str:
  """The command line of a stored run (its `--out` left out: where that run wrote is not a setting)."""
  args, skip = [], False
  for a in argv:
    if skip:
      skip = False
      continue
    if a == "--out":
      skip = True
      continue
    args.append(a)
  if args and args[0].startswith("(python -m "):
    module, args = args[0][len("(python -m "):-1], args[1:]
  return " ".join(["python -m", module] + args)


# -- gradients ---------------------------------------------------------------------------------------


def gradients(results: str) -> str:
  """The "Gradient quality" table: `bench_gradients.py`'s cases, then the humanoid of the sweep."""
  from .bench_gradients import table

  rows = _load(results, "gradients_cpu.json")["rows"]
  sweep = _load(results, "contact_gradients_cpu.json")
  hum = next(r for r in sweep["rows"] if r["model"] == "humanoid/humanoid.xml")
  label = f"MJWarp's humanoid from keyframe 0 ({hum['ncon0']} contacts), {hum['nstep']} steps"
  method = "analytic" if hum.get("gradient") == "analytic" else "lanes"
  rows = rows + [{"label": label, "rel_err": hum["grad_err"], "gradient": method}]
  if "grad_err_lanes" in hum:  # the lanes beside the adjoint, on the same functional
    rows.append({"label": label, "rel_err": hum["grad_err_lanes"], "gradient": "lanes"})
  return table(rows)


def adjoint(results: str) -> str:
  """The analytic adjoint's gradient / forward beside the lanes and MJX (`bench_adjoint.py`)."""
  from .bench_adjoint import table

  return table(_load(results, "adjoint_cpu.json"))


def linearize(results: str) -> str:
  """Analytic step Jacobians beside the lanes' (`bench_linearize.py`)."""
  from .bench_linearize import table

  return table(_load(results, "linearize_cpu.json")["rows"])


def distributed(results: str) -> str:
  """Scale-out with Ray: 1 vs N workers per job, bytes per call (`bench_distributed.py`), and its command."""
  from .bench_distributed import table

  stored = _load(results, "distributed_cpu.json")
  runs = "\n".join(f"- {r['job']}: `{_cmd(r.get('argv', stored['argv']), 'benchmarks.bench_distributed')}`"
                   for r in stored["rows"])
  return table(stored["rows"]) + "\n\nEach job's run:\n" + runs


def tolerance(results: str) -> str:
  """The constraint solver's tolerance, zero against diffsim's (`bench_tolerance.py`)."""
  from .bench_tolerance import table

  return table(_load(results, "tolerance_cpu.json"))


def forward(results: str) -> str:
  """diffsim's forward against raw `mjw.step` on the model as written (`bench_forward.py`)."""
  rep = _load(results, "forward_cpu.json")
  rows = rep["rows"]
  by = {(r["model"], r["nworld"]): r for r in rows}
  models = list(dict.fromkeys(r["model"] for r in rows))
  sizes = sorted({r["nworld"] for r in rows})
  head = "| model | " + " | ".join(f"{n:,} world{'s' if n > 1 else ''}" for n in sizes) + " |"
  out = [head, "|---|" + "---|" * len(sizes)]
  for m in models:
    cells = [f"{by[(m, n)]['fwd_over_raw']:.2f}x" if (m, n) in by else "" for n in sizes]
    out.append(f"| {_NAMES[m]} | " + " | ".join(cells) + " |")
  r0 = rows[0]
  out += ["", f"diffsim's forward-only rollout time over raw `mjw.step`'s on the model as its MJCF writes it, "
          f"{r0['nstep']} steps (`{_cmd(rep['argv'], 'benchmarks.bench_forward')}`; diffsim's forward at solver "
          f"tolerance {r0['tolerance']:.3g}, its lanes at {r0['lane_tolerance']:g})"
          + "".join(f"; rows re-measured by `{_cmd(a, 'benchmarks.bench_forward')}`" for a in rep.get("updated_by", []))
          + "."]
  return "\n".join(out)


# -- benchmarks --------------------------------------------------------------------------------------

_NAMES = {"cartpole": "cart-pole", "so101": "SO-101", "humanoid": "humanoid", "arm5": "5-link arm"}


def _rollout_rows(roll: list[dict]) -> list[tuple[str, str]]:
  by = {(r["model"], r["nworld"]): r for r in roll}
  models = list(dict.fromkeys(r["model"] for r in roll))
  sizes = sorted({r["nworld"] for r in roll})
  lo, hi = sizes[0], sizes[-1]
  one = [m for m in ("cartpole", "so101") if (m, lo) in by]
  tol = roll[0].get("tolerance", 0.0)  # diffsim's forward's solver tolerance in that run (0 before it was recorded)
  ctol = roll[0].get("lane_tolerance", tol)  # its lanes', and MuJoCo C's on diffsim's host model
  out = []

  ratio = lambda r: r["fwd_captured_wsps"] / r["fwd_eager_wsps"]
  out.append((f"forward, captured graph vs launched from Python ({lo} world, {by[(one[0], lo)]['nstep']} steps)",
              ", ".join(f"{_NAMES[m]} {_g(by[(m, lo)]['fwd_captured_wsps'])} vs {_g(by[(m, lo)]['fwd_eager_wsps'])}"
                        + (" world-steps/s" if i == 0 else "") + f" ({_g(ratio(by[(m, lo)]))}x)"
                        for i, m in enumerate(one))))
  out.append((f"forward vs raw `mjw.step` in a captured graph (same start and controls, timed alternately; "
              f"{', '.join(str(s) for s in sizes[:-1])} and {sizes[-1]} worlds)",
              f"{_span([r['fwd_over_raw'] for r in roll])}x its time over "
              f"{', '.join(_NAMES[m] for m in models[:-1])} and {_NAMES[models[-1]]} (diffsim records the "
              "trajectory and runs one `mjw.forward` after the last step for its sensors; below 1 where it "
              "skips the constraint solver in worlds without constraint rows, `diffsim/physics.py`)"
              + "".join(f"; the {_NAMES[m]}: {_span([by[(m, n)]['fwd_over_raw'] for n in sizes if (m, n) in by])}x"
                        for m in models if m == "arm5")))
  if all("fwd_over_user" in r for r in roll):
    parts = []
    for m in models:
      v = {s: by[(m, s)]["fwd_over_user"] for s in sizes if (m, s) in by}
      if max(v.values()) > 1.3 * min(v.values()):
        parts.append(f"{_f(v[lo], 1)}x ({lo} world) to {_f(v[hi], 1)}x ({hi}) on the {_NAMES[m]}")
      else:
        parts.append(f"{_span(list(v.values()), lambda x: _f(x, 1))}x on the {_NAMES[m]}")
    worst = max(models, key=lambda m: by[(m, hi)]["fwd_over_user"])
    w = by[(worst, hi)]
    # runs before issue 27 stepped diffsim's forward at the lanes' tolerance 0
    whose = (f"diffsim's is {tol:g}, so that all lanes take the same path" if tol == ctol else
             f"diffsim's forward runs at it too, its lanes at {ctol:g}")
    out.append(("forward vs raw `mjw.step` and `mujoco.rollout` on the model as its MJCF writes it (its own "
                f"solver tolerance; {whose})",
                f"diffsim's time over raw MJWarp's: {', '.join(parts[:-1])} and {parts[-1]}; `mujoco.rollout` "
                f"as written is {_g(w['mujoco_rollout_user_wsps'] / w['mujoco_rollout_wsps'])}x faster than with "
                f"tolerance {ctol:g} on the {_NAMES[worst]} at {hi} worlds"))
  nthread = roll[0].get("mujoco_rollout_nthread", "all")
  parts = []
  for m in models:
    v = {s: by[(m, s)]["fwd_captured_wsps"] / by[(m, s)]["mujoco_rollout_wsps"] for s in sizes if (m, s) in by}
    if (max(v.values()) > 1) != (min(v.values()) > 1):
      parts.append(f"{_NAMES[m]} {_f(v[lo])}x at {lo} world, {_f(v[hi])}x at {hi}")
    else:
      parts.append(f"{_NAMES[m]} {_span(list(v.values()))}x")
  like = " like diffsim" if tol == ctol else f" like diffsim's lanes, its forward at {tol:g}"
  out.append((f"forward vs `mujoco.rollout` ({nthread} threads, float64, tolerance {ctol:g}{like}; 1 thread in "
              "`cpu.md`)", "diffsim's speed relative to it: " + "; ".join(parts)))
  parts = []
  for m in models:
    # sizes whose gradient ran (`--grad-max-worlds` skips the largest)
    v = {s: by[(m, s)]["grad_over_fwd"] for s in sizes if (m, s) in by and by[(m, s)]["grad_over_fwd"] is not None}
    top = max(v)
    parts.append(f"{_NAMES[m]} {_g(v[lo])}x at {lo} world, {_g(v[top])}x at {top} ({by[(m, lo)]['nlane']} lanes)")
  out.append(("gradient / forward time (the largest sizes whose lanes fit `--grad-max-worlds`)",
              "about one MJWarp step per perturbation lane (guard lanes included): " + "; ".join(parts)))
  return out


def _mjx_rows(rows: list[dict]) -> list[tuple[str, str]]:
  # unpinned rows (XLA on every core, Warp on one) carry the text; rows pinned to one CPU each add a clause
  most = max(r.get("cores", 0) for r in rows)
  mjx = sorted([r for r in rows if r.get("cores", 0) == most], key=lambda r: r["nworld"])
  one = sorted([r for r in rows if r.get("cores") == 1 and most > 1], key=lambda r: r["nworld"])
  a, z = mjx[0], mjx[-1]
  slower = all(r["grad_ratio"] > 1 for r in mjx)
  verdict = "slower than MJX at every size on this CPU" if slower else \
    "faster than MJX at " + ", ".join(f"{r['nworld']:,}" for r in mjx if r["grad_ratio"] < 1) + " world(s), slower above"
  ms = lambda s: f"{_g(1e3 * s)} ms" if s < 1 else f"{_g(s)} s"
  sizes = ", ".join(f"{_f(r['grad_ratio'], 1)}x at {r['nworld']:,}" for r in mjx)
  sizes = sizes.replace("x at", "x MJX's time at", 1)
  fd = ", ".join(f"{_f(r['grad_fd_ratio'], 1)}x" for r in mjx)
  first = ", ".join(f"{_g(r['diffsim_first_call_s'])} s" for r in mjx)
  counts = ", ".join(f"{r['nworld']:,}" for r in mjx)
  pinned_grad = ", ".join(f"{_f(r['grad_ratio'], 1)}x at {r['nworld']:,}" for r in one)
  pinned_fd = ", ".join(f"{_f(r['grad_fd_ratio'], 1)}x" for r in one)
  caches = "XLA cold, Warp " + mjx[0]["warp_cache"] if "warp_cache" in mjx[0] else "caches not recorded in this run"
  return [
    (f"gradient vs MJX `jax.grad` through `mjx.step` (cart-pole, {a['nstep']} steps, final-state loss, same gradient "
     f"to {_g(max(r['grad_rel_err'] for r in mjx))})",
     f"{verdict}: {sizes} worlds ({ms(a['diffsim_grad_s'])} vs {ms(a['mjx_grad_s'])} at "
     f"{a['nworld']:,}, {ms(z['diffsim_grad_s'])} vs {ms(z['mjx_grad_s'])} at {z['nworld']:,}); with forward "
     f"differences (`central=False`: {a['nlane_fd']} lanes instead of {a['nlane']}, the gradient within "
     f"{_g(max(r['grad_fd_rel_err'] for r in mjx))} of MJX's) {fd}; MJX's forward is "
     f"{_span([r['fwd_ratio'] for r in mjx], lambda x: _f(x, 0))}x faster"
     + (f" ({most} cores for XLA, 1 for Warp); every thread pinned to one core: {pinned_grad} "
        f"(forward differences {pinned_fd})" if one else "")),
    ("first call (compilation plus one run) of the gradient above",
     f"MJX's `jax.grad`: {_span([r['mjx_first_call_s'] for r in mjx], lambda x: _f(x, 0))} s per world count; "
     f"diffsim's: {first} at {counts} worlds ({caches})"),
  ]


def _determinism_row(det: list[dict]) -> tuple[str, str]:
  costs = [r[k] for r in det for k in ("fwd_cost", "grad_cost")]
  bitwise = all(r[k] for r in det for k in ("fwd_bitwise_on", "grad_bitwise_on", "fwd_bitwise_off", "grad_bitwise_off"))
  models = " and ".join(f"{_NAMES[r['model']]} ({r['ncon_on']} contacts)" for r in det)
  return (f"determinism (`set_deterministic`, {det[0]['nworld']} worlds, {models})",
          f"on vs off costs {_span(costs)}x on the CPU, where kernels run sequentially"
          + (" and every replay repeats bitwise either way" if bitwise else "; some replays are not bitwise equal")
          + "; the GPU figure comes from `gpu_check.sh`")


def _trajopt_rows(rows: list[dict]) -> list[tuple[str, str]]:
  by = {(r["problem"], r["method"]): r for r in rows}
  problems = list(dict.fromkeys(r["problem"] for r in rows))

  def t2x(r):
    if r["time_to_2x_s"] is None:
      return "never within 2x"
    spread = f", runs {_span(r['time_to_2x_runs_s'])} s" if len(r.get("time_to_2x_runs_s") or []) > 1 else ""
    return f"{_f(r['time_to_2x_s'], 1)} s ({r['iters_to_2x']} iterations{spread})"

  desc = {"cartpole": "cart-pole swing-up", "so101": "SO-101 reach"}
  ilqr = ", ".join(f"{desc[p]} ({by[(p, 'ilqr')]['nworld']} worlds, {by[(p, 'ilqr')]['horizon']} steps) "
                   f"{t2x(by[(p, 'ilqr')])}" for p in problems if (p, "ilqr") in by)
  others = []
  for p in problems:
    got = [m for m in ("adam", "lbfgs") if (p, m) in by]
    if got:
      others.append(f"{desc[p]}: " + ", ".join(
        f"{'Adam' if m == 'adam' else 'L-BFGS'} ({by[(p, m)]['nit']} iterations) {t2x(by[(p, m)])}, "
        f"{100 * by[(p, m)]['success_rate']:.0f}% of worlds successful" for m in got)
        + f" (iLQR {100 * by[(p, 'ilqr')]['success_rate']:.0f}%)")
  first = ", ".join(f"{_NAMES[p]} {_f(by[(p, 'ilqr')]['first_iter_looped_s'])} s against "
                    f"{_g(by[(p, 'ilqr')]['first_iter_one_graph_s'])} s" for p in problems if (p, "ilqr") in by)
  reps = {r.get("repeats", 1) for r in rows}
  traffic = []
  for m in ("adam", "ilqr", "lbfgs"):
    rs = [r for r in rows if r["method"] == m]
    if rs:
      rw = lambda k: _span([r[k] for r in rs], lambda x: _g(x))
      replays = rw("replays_per_iter") if m != "ilqr" else ", ".join(
        f"{r['replays_per_iter']:,.0f} ({r['horizon']} steps)" for r in rs)
      traffic.append(f"{'Adam' if m == 'adam' else 'iLQR' if m == 'ilqr' else 'L-BFGS'}: {rw('writes_per_iter')} "
                     f"writes, {rw('reads_per_iter')} reads, {rw('launches_per_iter')} Python launches, "
                     f"graph replays {replays}")
  return [
    ("trajectory optimization, time to every world within 2x of the best cost any solver found (`bench_trajopt`"
     + (f", median of {max(reps)} runs" if max(reps) > 1 else ", one run per solver") + ")",
     f"iLQR: {ilqr}; " + "; ".join(others) + "; first iLQR iteration, graph capture included, with the step "
     f"graph replayed per step (the CPU default) against the iteration as one graph (the GPU default): {first}"),
    ("host traffic per optimizer iteration (without progress reads)",
     "; ".join(traffic) + " (iLQR on the CPU replays the rollouts' step graph once per step; on the GPU the "
     "iteration is one graph; L-BFGS is scipy on the host: a write and a read per evaluation)"),
  ]


def _sysid_row(rows: list[dict], argv: list[str]) -> tuple[str, str]:
  smooth = sorted([r for r in rows if not r["limits"] and r.get("case") != "armature"], key=lambda r: r["ntraj"])
  arm = [r for r in rows if r.get("case") == "armature"]
  lim = [r for r in rows if r["limits"]]
  s = lambda x: f"{_g(x)} s"
  a, z = smooth[0], smooth[-1]
  txt = (f"smooth ({a['nparam']} parameters, {a['steps']} steps): max relative error diffsim "
         f"{_span([r[k] for r in smooth for k in ('diffsim_err', 'directional_err')], sci)} "
         f"(truth within {_f(max(r[k] for r in smooth for k in ('diffsim_z', 'directional_z')), 1)} std), "
         f"`mujoco.sysid` {sci(max(r['sysid_err'] for r in smooth), 0)}; "
         f"{a['ntraj']} trajectory: diffsim's default {s(a['diffsim_s'])} ({a.get('diffsim_jacobian', 'forward')} "
         f"Jacobian, {a['diffsim_worlds']} lanes), `jacobian=\"directional\"` ({a['directional_worlds']} lanes) "
         f"{s(a['directional_s'])}, `mujoco.sysid` {s(a['sysid_s'])}; "
         f"{z['ntraj']} trajectories: {s(z['diffsim_s'])}, {s(z['directional_s'])} and {s(z['sysid_s'])}")
  if "sysid_1core_s" in z:
    txt += (f" (`mujoco.sysid` on all {z['sysid_nthread']} cores; pinned to one, as Warp is: "
            f"{s(a['sysid_1core_s'])} and {s(z['sysid_1core_s'])})")
  if arm:
    r = arm[0]
    txt += (f". The {r['nparam']} armatures alone ({r['ntraj']} smooth trajectories of {r['steps']} steps, issue 27): "
            f"diffsim's default {s(r['diffsim_s'])} ({r['diffsim_worlds'] // r['ntraj']} lanes per trajectory, "
            f"{r['diffsim_nit']} iterations, error {sci(r['diffsim_err'])}, truth within {_f(r['diffsim_z'], 2)} std), "
            f"`mujoco.sysid` {s(r['sysid_s'])} on all {r['sysid_nthread']} cores "
            f"({_f(r['diffsim_speedup'], 2)}x diffsim's time) and {s(r['sysid_1core_s'])} pinned to one, as diffsim "
            f"is ({_f(r['diffsim_speedup_1core'], 2)}x)")
  if lim:
    r = lim[0]
    conv = lambda k: "converged" if r[f"{k}_success"] else "not converged"
    txt += (f". At the limits ({r['nparam']} armatures, {r['ntraj']} trajectories of {r['steps']} steps, "
            f"{sum(1 for k in r['at_limit'] if k)} driven onto a limit): `mujoco.sysid` {s(r['sysid_s'])}, error "
            f"{sci(r['sysid_err'], 0)}; diffsim's default {s(r['diffsim_s'])}, {sci(r['diffsim_err'])}, "
            f"{conv('diffsim')}; `\"forward\"` alone {s(r['forward_s'])}, {sci(r['forward_err'])}, {conv('forward')}; "
            f"`\"directional\"` alone {s(r['directional_s'])} ({r['directional_nit']} iterations), "
            f"{sci(r['directional_err'])}, {conv('directional')}")
  return (f"system identification vs `mujoco.sysid` (5-link arm; `{_cmd(argv)}`)", txt)


def benchmarks(results: str) -> str:
  """The "Benchmarks" table: one row per measurement, each figure from `cpu.json`."""
  rep = _load(results, "cpu.json")
  sec, argv = rep["sections"], rep.get("argv_by_section", {})
  rows = []
  if isinstance(sec.get("rollout"), list):
    rows += _rollout_rows(sec["rollout"])
  if isinstance(sec.get("mjx"), list):
    rows += _mjx_rows(sec["mjx"])
  if isinstance(sec.get("determinism"), list):
    rows.append(_determinism_row(sec["determinism"]))
  if isinstance(sec.get("trajopt"), list):
    rows += _trajopt_rows(sec["trajopt"])
  if isinstance(sec.get("sysid"), list):
    rows.append(_sysid_row(sec["sysid"], argv.get("sysid", [])))
  out = ["| measurement | result |", "|---|---|"] + [f"| {m} | {r} |" for m, r in rows]
  out += ["", "Each section's run (`benchmarks/results/cpu.json`, tables in `cpu.md`):"]
  out += [f"- {name}: `{_cmd(a)}`" for name, a in argv.items() if isinstance(sec.get(name), list)]
  return "\n".join(out)


def startup(results: str) -> str:
  """The "Start-up" paragraph, from `cpu.json`'s startup section (`bench_startup.py`)."""
  sec = _load(results, "cpu.json")["sections"]
  rows = {r["what"]: r for r in sec["startup"]}
  imports = next(r["imports_s"] for r in sec["startup"] if r.get("imports_s"))
  sysid = rows["diffsim sysid (spring-mass, 500 samples)"]["wall_s"]
  bare = rows["diffsim sysid --no-plots"]["wall_s"]
  cold = next((r["wall_s"] for w, r in rows.items() if "cold kernel cache" in w), None)
  return (f"`import diffsim` loads Warp, MuJoCo Warp and matplotlib only when a name that needs them is first\n"
          f"used ({_f(rows['import diffsim']['wall_s'])} s; `python -c pass` {_f(rows['python -c pass']['wall_s'])} s). "
          f"A whole warm-cache `diffsim sysid` process on a\none-parameter spring-mass with 500 samples takes "
          f"{_f(sysid, 1)} s on this project's 2-core CPU ({_f(bare, 1)} s with\n`--no-plots`"
          + (f"; {_f(cold, 0)} s on a new machine, whose empty kernel cache makes Warp compile every kernel the "
             "command\nneeds" if cold is not None else "")
          + f"): importing `mujoco_warp` alone takes {_f(imports['mujoco_warp'])} s (Warp builds its kernels'\n"
          f"definitions at import; `warp` itself {_f(imports['warp'])} s, `mujoco` {_f(imports['mujoco'])} s),\n"
          "and MJWarp's first step hashes and loads its cached kernel modules (`python -m benchmarks.bench_startup`,\n"
          f"median of {rows['import diffsim']['repeats']} fresh processes each)." + _startup_tests(sec["startup"]))


def _startup_tests(section: list[dict]) -> str:
  """The start-up paragraph's sentences on `mujoco.sysid`'s test problems, where measured."""
  floor = next((r["wall_s"] for r in section if "upstream floor" in r["what"]), None)
  # per problem, in bench_startup's order: the whole process, --no-plots, mujoco.sysid's API call
  runs = {name: [r["wall_s"] for r in section if r.get("problem") == name] for name in ("arm", "spring-mass")}
  arm = next((r for r in section if r.get("problem") == "arm" and "rel_error" in r), None)
  if floor is None or arm is None or len(runs["arm"]) != 3:
    return ""
  whole, bare, api = runs["arm"]
  txt = (f"\nOn `mujoco.sysid`'s own arm test (5 armatures from 0.01, 999 samples) the whole process takes "
         f"{_f(whole, 2)} s\n({_f(bare, 2)} s with `--no-plots`; error {sci(arm['rel_error'])}; the answer is "
         f"printed before the plots are drawn, by a second\nprocess that draws each figure once while the solve runs, "
         f"then the real ones side by side in forked children), "
         f"against {_f(api, 2)} s for `mujoco.sysid`'s API call in a warm process;\n"
         f"a process that only imports Warp and MuJoCo Warp takes {_f(floor, 2)} s, the floor every command pays")
  if len(runs["spring-mass"]) == 3:
    whole, bare, api = runs["spring-mass"]
    txt += (f"\n(the spring-mass test: {_f(whole, 2)} s, {_f(bare, 2)} s with `--no-plots`, `mujoco.sysid` "
            f"{_f(api, 2)} s)")
  return txt + "."


def sysid_tests(results: str) -> str:
  """`mujoco.sysid`'s own test problems in both tools, in-process (`bench_sysid.py --tests`)."""
  from .bench_sysid import tests_table

  payload = _load(results, "sysid_tests_cpu.json")
  return tests_table(payload["rows"]) + f"\n\n(`{_cmd(payload['argv'], 'benchmarks.bench_sysid')}`)"


def rendering(results: str) -> str:
  """World-frames per second of MJWarp's ray tracer beside `mujoco.Renderer` (`bench_render.py`)."""
  from .bench_render import table

  return table(_load(results, "render_cpu.json")) + "\n\n(`python -m benchmarks.bench_render`)"


# name: (renderer, its sources under benchmarks/results)
BLOCKS = {
  "gradients": (gradients, ("gradients_cpu.json", "contact_gradients_cpu.json")),
  "benchmarks": (benchmarks, ("cpu.json",)),
  "adjoint": (adjoint, ("adjoint_cpu.json",)),
  "distributed": (distributed, ("distributed_cpu.json",)),
  "tolerance": (tolerance, ("tolerance_cpu.json",)),
  "forward": (forward, ("forward_cpu.json",)),
  "linearize": (linearize, ("linearize_cpu.json",)),
  "startup": (startup, ("cpu.json",)),
  "sysid_tests": (sysid_tests, ("sysid_tests_cpu.json",)),
  "render": (rendering, ("render_cpu.json",)),
}


def _pattern(name: str) -> re.Pattern:
  return re.compile(rf"(<!-- begin generated: {name} [^\n]*-->\n)(.*?)(<!-- end generated: {name} -->)", re.S)


def render(text: str, results: str = RESULTS) -> str:
  """README text with every generated block rendered anew from `results`."""
  for name, (fn, _) in BLOCKS.items():
    pat = _pattern(name)
    if not pat.search(text):
      raise ValueError(f"README.md has no generated block {name!r}: add the lines "
                       f"'<!-- begin generated: {name} (python -m benchmarks.readme) -->' and "
                       f"'<!-- end generated: {name} -->' where it belongs")
    body = fn(results)
    text = pat.sub(lambda m: m.group(1) + body + "\n" + m.group(3), text, count=1)
  return text


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--check", action="store_true", help="exit 1 if README.md disagrees with the stored results")
  parser.add_argument("--readme", default=README)
  parser.add_argument("--results", default=RESULTS)
  args = parser.parse_args(argv)
  with open(args.readme) as f:
    text = f.read()
  new = render(text, args.results)
  if new == text:
    return 0
  if args.check:
    sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True), "README.md",
                                               "README.md from benchmarks/results"))
    return 1
  with open(args.readme + ".tmp", "w") as f:
    f.write(new)
  os.replace(args.readme + ".tmp", args.readme)
  print(f"updated {args.readme}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
