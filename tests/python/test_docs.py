"""docs/python.md's examples run as written (from a folder that sees the repository's tests/, as
the repository root does), so the page stays true."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_python_md_examples_run(monkeypatch, tmp_path):
    text = (ROOT / "docs/python.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 2, "docs/python.md has two python examples: reads, and the commands"
    (tmp_path / "tests").symlink_to(ROOT / "tests")  # what the examples write stays out of the tree
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(compile(blocks[0], "docs/python.md", "exec"), scope)
    assert scope["head"].shape == (8, 16) and scope["emb"].shape == (96, 32)
    assert tuple(scope["t"].shape) == (96, 32)
    scope = {}
    exec(compile(blocks[1], "docs/python.md", "exec"), scope)
    assert scope["plan"]["dry_run"] and not (tmp_path / "m.pt").exists()
    assert (tmp_path / "model.safetensors").is_file() and (tmp_path / "hf/model.safetensors").is_file()
    assert len(list((tmp_path / "ckpt-w4").glob("*.distcp"))) == 4 and (tmp_path / "ckpt-bf16/.metadata").is_file()
