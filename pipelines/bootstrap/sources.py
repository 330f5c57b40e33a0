"""Pure steps of bootstrap: read sources, strip HTML, token-aware chunks, schema and glossary text."""

from __future__ import annotations

import csv
import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from app.kit.text import sha256

DOC_SUFFIXES = {".md", ".markdown", ".txt", ".html", ".htm", ".rst"}


class _TextOnly(HTMLParser):
    SKIP = {"script", "style", "head"}
    BLOCK = {"p", "div", "br", "li", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "section", "article", "pre"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self._skip += 1
        elif tag in self.BLOCK:
            self.out.append("\n\n")

    def handle_endtag(self, tag):
        if tag in self.SKIP and self._skip:
            self._skip -= 1
        elif tag in self.BLOCK:
            self.out.append("\n\n")

    def handle_data(self, data):
        if not self._skip:
            self.out.append(data)


def html_to_text(raw: str) -> str:
    p = _TextOnly()
    p.feed(raw)
    text = html.unescape("".join(p.out))
    return re.sub(r"\n\s*\n+", "\n\n", re.sub(r"[ \t]+", " ", text)).strip()


@dataclass
class Document:
    uri: str
    title: str
    text: str
    content_hash: str


def read_folder(folder: Path) -> list[Document]:
    docs = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in DOC_SUFFIXES):
        raw = path.read_text(encoding="utf-8", errors="replace")
        text = html_to_text(raw) if path.suffix.lower() in (".html", ".htm") else raw.strip()
        if not text:
            continue
        rel = path.relative_to(folder).as_posix()
        title = next((ln.lstrip("# ").strip() for ln in text.splitlines() if ln.strip()), rel)[:200]
        docs.append(Document(uri=f"doc:{rel}", title=title, text=text, content_hash=sha256(text)))
    return docs


def chunk_text(text: str, count_tokens: Callable[[str], int], max_tokens: int = 200) -> list[str]:
    """Paragraph-first chunks of at most `max_tokens`; long paragraphs split on sentences, then words."""
    pieces: list[str] = []
    for para in (p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()):
        if count_tokens(para) <= max_tokens:
            pieces.append(para)
            continue
        for sent in re.split(r"(?<=[.!?])\s+", para):
            if count_tokens(sent) <= max_tokens:
                pieces.append(sent)
                continue
            words, cur = sent.split(), []
            for w in words:
                if cur and count_tokens(" ".join(cur + [w])) > max_tokens:
                    pieces.append(" ".join(cur))
                    cur = []
                cur.append(w)
            if cur:
                pieces.append(" ".join(cur))
    chunks, cur = [], ""
    for piece in pieces:
        cand = f"{cur}\n\n{piece}" if cur else piece
        if cur and count_tokens(cand) > max_tokens:
            chunks.append(cur)
            cur = piece
        else:
            cur = cand
    if cur:
        chunks.append(cur)
    return chunks


@dataclass
class TableInfo:
    schema: str | None
    name: str
    comment: str | None
    columns: list[dict] = field(default_factory=list)  # name, type, nullable, comment
    foreign_keys: list[dict] = field(default_factory=list)  # columns, ref_table, ref_columns

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name

    def describe(self) -> str:
        cols = []
        for c in self.columns:
            extra = f" -- {c['comment']}" if c.get("comment") else ""
            cols.append(f"  {c['name']} {c['type']}{'' if c['nullable'] else ' NOT NULL'}{extra}")
        fks = [f"  {', '.join(f['columns'])} -> {f['ref_table']}({', '.join(f['ref_columns'])})" for f in self.foreign_keys]
        head = f"Table {self.qualified}" + (f": {self.comment}" if self.comment else "")
        return "\n".join([head, "Columns:", *cols] + (["Foreign keys:", *fks] if fks else []))

    def hint(self) -> str:
        cols = ", ".join(c["name"] + (f" ({c['comment']})" if c.get("comment") else "") for c in self.columns)
        text = f"Table {self.qualified}" + (f" ({self.comment})" if self.comment else "") + f" has columns: {cols}."
        for f in self.foreign_keys:
            text += f" {self.qualified}.{','.join(f['columns'])} references {f['ref_table']}.{','.join(f['ref_columns'])}."
        return text


def inspect_schema(url: str) -> list[TableInfo]:
    from sqlalchemy import create_engine, inspect

    eng = create_engine(url)
    try:
        insp = inspect(eng)
        out = []
        for schema in [None]:
            for name in sorted(insp.get_table_names(schema=schema)):
                try:
                    comment = insp.get_table_comment(name, schema=schema).get("text")
                except NotImplementedError:
                    comment = None
                pk = set((insp.get_pk_constraint(name, schema=schema) or {}).get("constrained_columns") or [])
                cols = [
                    {
                        "name": c["name"],
                        "type": str(c["type"]),
                        "nullable": bool(c.get("nullable", True)),
                        "comment": c.get("comment"),
                        "primary_key": c["name"] in pk,
                    }
                    for c in insp.get_columns(name, schema=schema)
                ]
                fks = [
                    {
                        "columns": fk["constrained_columns"],
                        "ref_table": fk["referred_table"],
                        "ref_columns": fk["referred_columns"],
                    }
                    for fk in insp.get_foreign_keys(name, schema=schema)
                ]
                out.append(TableInfo(schema=schema, name=name, comment=comment, columns=cols, foreign_keys=fks))
        return out
    finally:
        eng.dispose()


@dataclass
class GlossaryEntry:
    term: str
    meaning: str
    mapping: str

    def text(self) -> str:
        return f"'{self.term}' means {self.meaning}" + (f" (maps to {self.mapping})" if self.mapping else "") + "."


def read_glossary(path: Path) -> list[GlossaryEntry]:
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    out = []
    for r in rows:
        r = {k.strip().lower(): (v or "").strip() for k, v in r.items() if k}
        if r.get("term") and r.get("meaning"):
            out.append(GlossaryEntry(r["term"], r["meaning"], r.get("mapping", "")))
    return out


def redact_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
