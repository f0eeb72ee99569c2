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
