"""The README's example runs as written."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_example_runs(tmp_path):
  text = (ROOT / "README.md").read_text()
  code = re.search(r"## Example\n\n```python\n(.*?)```", text, re.S).group(1)
  script = tmp_path / "example.py"  # Warp kernels need a source file
  script.write_text(code)
  out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  assert "(64, 100, 1)" in out.stdout


def test_readme_figures_match_the_stored_results():
  # the README's generated blocks (gradient quality, benchmarks) are what benchmarks/readme.py renders
  # from benchmarks/results/*.json: after storing new results, run `python -m benchmarks.readme`
  from benchmarks import readme

  text = (ROOT / "README.md").read_text()
  for name in readme.BLOCKS:
    assert f"<!-- begin generated: {name} " in text and f"<!-- end generated: {name} -->" in text, name
  rendered = readme.render(text)
  if rendered != text:
    diff = subprocess.run([sys.executable, "-m", "benchmarks.readme", "--check"], capture_output=True, text=True,
                          cwd=ROOT).stdout
    raise AssertionError("README.md disagrees with benchmarks/results (run `python -m benchmarks.readme`):\n"
                         + diff[-3000:])
  assert readme.main(["--check"]) == 0


def test_readme_check_fails_on_a_changed_result(tmp_path):
  # the check can fail: one stored figure changed (the humanoid's control gradient error, and one
  # rollout ratio) makes the rendered README differ from the one in the repository, and --check exit 1
  import json
  import shutil

  from benchmarks import readme

  results = tmp_path / "results"
  shutil.copytree(readme.RESULTS, results)
  text = (ROOT / "README.md").read_text()
  sweep = json.loads((results / "contact_gradients_cpu.json").read_text())
  hum = next(r for r in sweep["rows"] if r["model"] == "humanoid/humanoid.xml")
  hum["grad_err"]["ctrl"] *= 3.0
  (results / "contact_gradients_cpu.json").write_text(json.dumps(sweep))
  changed = readme.render(text, str(results))
  assert changed != text and readme.sci(hum["grad_err"]["ctrl"]) in changed  # 7.1e-3 -> 2.1e-2
  readme_copy = tmp_path / "README.md"
  readme_copy.write_text(text)
  assert readme.main(["--check", "--readme", str(readme_copy), "--results", str(results)]) == 1
  assert readme_copy.read_text() == text  # --check writes nothing
  cpu = json.loads((results / "cpu.json").read_text())
  cpu["sections"]["rollout"][0]["fwd_eager_wsps"] /= 2.0
  (results / "cpu.json").write_text(json.dumps(cpu))
  assert readme.main(["--readme", str(readme_copy), "--results", str(results)]) == 0  # rewrites it
  assert readme_copy.read_text() == readme.render(text, str(results)) != changed
