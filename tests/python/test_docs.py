"""docs/python.md's example runs as written (from the repository root), so the page stays true."""
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_python_md_example_runs(monkeypatch):
    text = (ROOT / "docs/python.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "docs/python.md has one python example"
    monkeypatch.chdir(ROOT)
    scope = {}
    exec(compile(blocks[0], "docs/python.md", "exec"), scope)
    assert scope["head"].shape == (8, 16) and scope["emb"].shape == (96, 32)
    assert tuple(scope["t"].shape) == (96, 32)
