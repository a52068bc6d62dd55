"""README.md at its peers' size (issue 42 item 4): its quick start as it was, its links and figures kept true.

The references moved to docs/ (cli.md, python.md, schemas.md, serving/, eval.md); every relative link in the README
and in docs/ must reach a file, and a link with an anchor a heading of that file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCUMENTS = [README, *sorted((ROOT / "docs").rglob("*.md"))]

QUICK_START = """\
```bash
# 1. install and compile the example set (1,000 tool names) with the bundled Qwen2 tokenizer
python3 -m venv .venv && . .venv/bin/activate && pip install -e . && triec compile examples/tools.txt

# 2. install the test runner and run every test session (noxfile.py)
pip install nox && nox
```
"""

FENCE = re.compile(r"^```.*?^```[ \t]*$", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")


def section(text: str, heading: str) -> str:
    """The body of a ``## heading`` section, up to the next ``## `` heading."""
    start = text.index(f"\n## {heading}\n") + len(heading) + 5
    end = text.find("\n## ", start)
    return text[start : end if end >= 0 else len(text)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def test_readme_is_at_most_250_lines() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 250


def test_quick_start_is_the_two_commands() -> None:
    body = section(README.read_text(encoding="utf-8"), "Quick start")
    assert QUICK_START in body
    assert "The first command writes `tools.triec`" in body


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file(document: Path) -> None:
    text = INLINE_CODE.sub("", FENCE.sub("", document.read_text(encoding="utf-8")))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        resolved = (document.parent / path).resolve() if path else document
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor}")
        elif not resolved.is_relative_to(ROOT):
            broken.append(f"{target}: outside the repository")
    assert broken == [], f"{document.relative_to(ROOT)}: {broken}"


def test_readme_figures_are_the_rendered_tables() -> None:
    """Each figure of the README's list is a number of its suite's tables, as docs/benchmarks.md renders them from
    the result files (a rerun that changes one fails here: copy the new figure)."""
    figures = section(README.read_text(encoding="utf-8"), "Figures")
    tables = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    items = re.findall(r"^- `([a-z_]+)`: (.*(?:\n  .*)*)", figures, re.M)
    assert 3 <= len(items) <= 5
    for suite, item in items:
        blocks = "".join(re.findall(rf"<!-- bench:{suite}:[a-z0-9_-]+ -->\n(.*?)<!-- /bench:{suite}:", tables, re.S))
        assert blocks, f"docs/benchmarks.md has no table of the suite {suite}"
        numbers = re.findall(r"\d[\d,]*\.\d+|\d{1,3}(?:,\d{3})+", item)
        assert numbers, item
        missing = [n for n in numbers if not re.search(rf"(?<![\d.,]){re.escape(n)}(?![\d])", blocks)]
        assert missing == [], f"{suite}: not in its tables (rerun, then copy the new figures): {missing}"


def test_readme_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's Python block, up to the transformers lines (which need a model), runs as written."""
    text = section(README.read_text(encoding="utf-8"), "Python")
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    code = code.split("from triec.integrations.transformers", 1)[0]
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {}
    exec(compile(code, "README.md", "exec"), scope)
    table = scope["table"]
    assert os.path.exists("tools.triec")
    assert table.num_values == 3  # type: ignore[attr-defined]


def test_patterns_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/patterns.md's first Python block runs as written: a row of the mask width, a state after a token."""
    text = (ROOT / "docs" / "patterns.md").read_text(encoding="utf-8")
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {}
    exec(compile(code, "docs/patterns.md", "exec"), scope)
    table, row, state = scope["table"], scope["row"], scope["state"]
    assert row.ndim == 1 and row.shape[0] == table.mask_writer().fill_one(table.start).shape[1]  # type: ignore[attr-defined]
    assert 0 <= int(state) < table.num_states and table.prefix(state).isdigit()  # type: ignore[attr-defined]
