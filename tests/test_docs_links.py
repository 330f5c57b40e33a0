"""The docs cite only files that exist in the repository: every path in README.md and docs/, backticked
or not (`app/search/service.py`, bench/results/..., docs/branches.md), must name a file or folder of
this checkout, and no doc may point outside it (a sibling checkout's notes or data)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOPS = ("app", "bench", "docs", "tests", "pipelines", "migrations", "policies", "scripts", "ui")
# A run of path characters that starts with a top-level folder of the repository, not inside a longer
# path or a URL (`../app/x` or `https://host/docs/y` are not this repository's paths).
PATH = re.compile(r"(?<![\w/.:-])((?:" + "|".join(TOPS) + r")/[A-Za-z0-9_./<>*{}\-]*)")
OUTSIDE = re.compile(r"\.\./shared|/work/|shared/(?:NOTES|DESIGN|API|STYLE)\.md")


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _cited(text: str) -> set[str]:
    """Concrete paths only: a template (`app/<domain>/service.py`), a glob or an elision is no file."""
    found = set()
    for raw in PATH.findall(text):
        path = raw.rstrip(".,:;")
        if any(c in path for c in "<>*{}") or "..." in path:
            continue
        found.add(path)
    return found


def _exists(path: str) -> bool:
    p = ROOT / path
    if p.exists():
        return True
    # A module named with one of its attributes: `app/kit/database/sql.py::among` or `pipelines/x/trainer.run`.
    file = path.split("::")[0]
    stem, _, attr = file.rpartition(".")
    return (ROOT / file).exists() or bool(stem and attr.isidentifier() and (ROOT / f"{stem}.py").exists())


def test_the_path_pattern_reads_paths_and_skips_templates():
    text = (
        "see `app/search/service.py`, docs/branches.md. and `app/<domain>/schemas.py`, `bench/results/x.*`, "
        "https://example.org/docs/x.md, ../app/y.py"
    )
    assert _cited(text) == {"app/search/service.py", "docs/branches.md"}


def test_a_module_may_be_named_with_its_attribute():
    assert _exists("tests/test_docs_links.py::test_a_module_may_be_named_with_its_attribute")
    assert _exists("tests/test_docs_links.test_a_module_may_be_named_with_its_attribute")
    assert not _exists("tests/no_such_module.py")


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_path_a_doc_cites_exists(doc: Path):
    cited = _cited(doc.read_text())
    missing = sorted(p for p in cited if not _exists(p))
    assert not missing, f"{doc.relative_to(ROOT)} cites paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_doc_cites_a_file_outside_the_repository(doc: Path):
    lines = [f"{n}: {line.strip()}" for n, line in enumerate(doc.read_text().splitlines(), 1) if OUTSIDE.search(line)]
    assert not lines, f"{doc.relative_to(ROOT)} points outside the repository:\n" + "\n".join(lines)


LINK = re.compile(r"\]\(([^)\s]+\.md)(?:#([^)\s]+))?\)")


def _anchors(doc: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces as hyphens."""
    heads = re.findall(r"^#+ (.+)$", doc.read_text(), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_between_docs_reaches_its_file_and_heading(doc: Path):
    broken = []
    for target, anchor in LINK.findall(doc.read_text()):
        if "://" in target:
            continue
        path = (doc.parent / target).resolve()
        if not path.is_file():
            broken.append(target)
        elif anchor and anchor not in _anchors(path):
            broken.append(f"{target}#{anchor}")
    assert not broken, f"{doc.relative_to(ROOT)} links to missing files or headings: {broken}"
