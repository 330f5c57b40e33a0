"""Bootstrap's enrich step (extract -> enrich -> index): pure functions, no memscale database.

Database schemas:
- column descriptions from the name (split into words, common abbreviations spelled out), the
  type, and statistics of the source where it allows them (distinct values, nulls, range; the
  values themselves when there are few);
- join paths from foreign keys and from matching names (`orders.customer_id` -> `customers.id`,
  or the same column name as another table's primary key);
- glossary terms linked to the columns their mapping names (`t_k81.c_rg = 'R3'`).
Documents: sections (markdown headings, else paragraphs) with a title and an extractive
abstract (the first sentences, ~40 words). Extractive on purpose: the bundled 135M model
paraphrases badly and would put words in the source's mouth.

Each result also yields the asset's knowledge nodes (catalog/schema/table/column,
folder/document/section, glossary/term), and the table text it produces is what gets
embedded, so the asset's content hash covers the enrichment: a change in the schema, the
statistics or the linked terms re-runs it.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from pathlib import PurePosixPath

ENRICH_VERSION = 1
ABSTRACT_WORDS = 40

WORDS = {  # abbreviations seen in column names -> words
    "id": "identifier",
    "amt": "amount",
    "qty": "quantity",
    "dt": "date",
    "ts": "timestamp",
    "num": "number",
    "no": "number",
    "nr": "number",
    "cnt": "count",
    "pct": "percent",
    "desc": "description",
    "addr": "address",
    "cust": "customer",
    "acct": "account",
    "txn": "transaction",
    "inv": "invoice",
    "prod": "product",
    "cat": "category",
    "st": "status",
    "stat": "status",
    "rg": "region",
    "reg": "region",
    "seg": "segment",
    "org": "organisation",
    "dept": "department",
    "emp": "employee",
    "mgr": "manager",
    "avg": "average",
    "tot": "total",
    "rev": "revenue",
    "yr": "year",
    "mo": "month",
    "wk": "week",
    "fk": "reference",
}


SHORT_WORDS = {"age", "tax", "fee", "vat", "sku", "url", "zip", "day", "end", "key", "name", "due", "net", "fx"}


@dataclass
class TermRef:
    """A glossary term as enrichment sees it: its text, and the columns its mapping names."""

    term: str
    text: str
    mapping: str
    refs: list[str]  # qualified column names (table.column), lower case
    asset_id: uuid.UUID | None = None  # the glossary asset it comes from (lineage)


@dataclass
class Node:
    kind: str
    name: str
    path: str
    parent_path: str
    ord: int = 0
    text: str = ""
    refs: list[str] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def node_id(self, asset_id: uuid.UUID) -> uuid.UUID:
        return uuid.uuid5(asset_id, self.path)


def _seg(name: str) -> str:
    return name.replace("/", "∕").strip() or "_"


def ancestors(kinds: list[str], names: list[str]) -> list[Node]:
    """Nodes for every level of a path (catalog, schema, ... or folders)."""
    out, parent = [], ""
    for kind, name in zip(kinds, names):
        path = f"{parent}/{_seg(name)}" if parent else _seg(name)
        out.append(Node(kind, name, path, parent))
        parent = path
    return out


def name_words(name: str) -> list[str]:
    parts = [p for p in re.split(r"[_\W]+|(?<=[a-z])(?=[A-Z])", name) if p]
    return [WORDS.get(p.lower(), p.lower()) for p in parts]


def describe_column(col: dict, stats: dict | None, *, primary: bool) -> str:
    """`col`: name, type, nullable, comment (sources.TableInfo); `stats`: repository.column_stats."""
    words = [
        w
        for w in name_words(col["name"])
        if w in WORDS.values() or w in SHORT_WORDS or (len(w) >= 4 and re.search(r"[aeiou]", w) and not re.search(r"\d", w))
    ]  # opaque codes say nothing
    bits = []
    if col.get("comment"):
        bits.append(col["comment"])
    if words:
        bits.append(" ".join(words))
    bits.append(str(col["type"]).lower())
    if primary:
        bits.append("primary key")
    if stats:
        if stats.get("values") is not None:
            bits.append(f"{stats['distinct']} distinct values: " + ", ".join(str(v) for v in stats["values"]))
        elif stats.get("rows"):
            bits.append(f"{stats['distinct']} distinct in {stats['rows']} rows")
            if stats.get("min") is not None and not isinstance(stats["min"], (bytes, bytearray)):
                bits.append(f"from {str(stats['min'])[:24]} to {str(stats['max'])[:24]}")
        if stats.get("nulls"):
            bits.append(f"{stats['nulls']} nulls")
    return "; ".join(bits)


def join_paths(tables: list) -> dict[str, list[dict]]:
    """{qualified table: [{from, to, via}]}: foreign keys, then matching names."""
    out: dict[str, list[dict]] = {t.qualified: [] for t in tables}
    seen: set[tuple[str, str]] = set()

    def add(a: str, b: str, via: str) -> None:
        if (a, b) in seen or (b, a) in seen or a == b:
            return
        seen.add((a, b))
        ta, tb = a.rsplit(".", 1)[0], b.rsplit(".", 1)[0]
        for t in (ta, tb):
            if t in out:
                out[t].append({"from": a, "to": b, "via": via})

    for t in tables:
        for fk in t.foreign_keys:
            for c, rc in zip(fk["columns"], fk["ref_columns"]):
                add(f"{t.qualified}.{c}", f"{fk['ref_table']}.{rc}", "foreign key")
    by_pk: dict[str, list] = {}  # a column named like another table's primary key
    by_stem: dict[str, list] = {}  # <table>_id, <table>id
    for i, other in enumerate(tables):
        stem = other.name.lower().rstrip("s")
        for pk in (c["name"] for c in other.columns if c.get("primary_key")):
            by_pk.setdefault(pk.lower(), []).append((i, other, pk))
            for key in (f"{stem}_id", f"{stem}id"):
                by_stem.setdefault(key, []).append((i, other, pk))
    for t in tables:  # lookups, not pairs of tables: 500 tables x 20 columns stays linear
        for c in t.columns:
            n = c["name"].lower()
            cands = (by_pk.get(n, []) if not c.get("primary_key") else []) + by_stem.get(n, [])
            for _, other, pk in sorted(cands, key=lambda x: x[0]):
                if other is not t:
                    add(f"{t.qualified}.{c['name']}", f"{other.qualified}.{pk}", "matching names")
    return out


_QUALIFIED = re.compile(r"\b([A-Za-z_][\w$]*)\.([A-Za-z_][\w$]*)\b")


def term_refs(mapping: str, columns: set[str] | None = None) -> list[str]:
    """Qualified names (lower case) a glossary mapping mentions; with `columns`, only those."""
    found = {f"{a}.{b}".lower() for a, b in _QUALIFIED.findall(mapping or "")}
    return sorted(found if columns is None else found & columns)


@dataclass
class EnrichedTable:
    text: str  # what is embedded and hashed
    hint: str  # the schema-hint memory
    nodes: list[Node]
    joins: list[dict]
    terms: list[TermRef]  # the glossary terms written into the text


def enrich_table(t, catalog: str, stats: dict[str, dict], joins: list[dict], terms: list[TermRef]) -> EnrichedTable:
    schema = t.schema or "main"
    base = ancestors(["catalog", "schema", "table"], [catalog, schema, t.name])
    table_node = base[-1]
    by_col: dict[str, list[TermRef]] = {}
    table_terms = []
    for term in terms:
        for r in term.refs:
            tbl, col = r.rsplit(".", 1)
            if tbl == t.qualified.lower():
                by_col.setdefault(col, []).append(term)
        if not term.refs and re.search(rf"\b{re.escape(t.name.lower())}\b", term.mapping.lower()):
            table_terms.append(term)
    used: list[TermRef] = list(table_terms)
    col_lines, col_nodes, meta_cols = [], [], []
    for i, c in enumerate(t.columns):
        desc = describe_column(c, stats.get(c["name"]), primary=bool(c.get("primary_key")))
        linked = by_col.get(c["name"].lower(), [])
        used += [x for x in linked if x not in used]
        gloss = "; ".join(f"{x.term}: {x.mapping}" for x in linked)
        line = f"  {c['name']} {c['type']}{'' if c['nullable'] else ' NOT NULL'}: {desc}" + (
            f". Glossary: {gloss}" if gloss else ""
        )
        col_lines.append(line)
        ref = f"{t.qualified}.{c['name']}".lower()
        meta_cols.append({"name": c["name"], "ref": ref})
        col_nodes.append(
            Node(
                "column",
                c["name"],
                f"{table_node.path}/{_seg(c['name'])}",
                table_node.path,
                i,
                text=line.strip(),
                refs=[ref],
                meta={"summary": desc, "type": str(c["type"])},
            )
        )
    join_lines = [f"  {j['from']} = {j['to']} ({j['via']})" for j in joins]
    about = "; ".join(f"{x.term}: {x.text}" for x in table_terms)
    head = (
        f"Table {t.qualified} in {catalog} (schema {schema})"
        + (f": {t.comment}" if t.comment else "")
        + (f". Glossary: {about}" if about else "")
    )
    text = "\n".join([head, "Columns:", *col_lines] + (["Joins:", *join_lines] if join_lines else []))
    summary = (t.comment or about or f"{len(t.columns)} columns")[:160]
    table_node.text, table_node.meta = text, {"summary": summary, "columns": meta_cols, "joins": joins}
    for n in base[:-1]:
        n.meta = {"summary": f"{n.kind} of {catalog}"}
    hint = t.hint() + "".join(f" {x.term}: {x.mapping}." for x in used)
    return EnrichedTable(text, hint, base + col_nodes, joins, used)


@dataclass
class Section:
    title: str
    text: str
    abstract: str


def abstract(text: str, words: int = ABSTRACT_WORDS) -> str:
    """The first sentences of a text, up to about `words` words (extractive)."""
    sentences = re.split(r"(?<=[.!?])\s+", " ".join(text.split()))
    out: list[str] = []
    for s in sentences:
        if out and len(" ".join(out + [s]).split()) > words:
            break
        out.append(s)
    res = " ".join(out)
    return res if len(res.split()) <= words else " ".join(res.split()[:words]) + " …"


_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$|^(.+)\n(=+|-+)\s*$", re.M)


def sections(title: str, text: str) -> list[Section]:
    """Markdown headings split sections; a text without headings is one section per few paragraphs."""
    marks = [(m.start(), (m.group(2) or m.group(3)).strip(), m.end()) for m in _HEADING.finditer(text)]
    out: list[Section] = []
    if marks:
        pre = text[: marks[0][0]].strip()
        if pre:
            out.append(Section(title, pre, abstract(pre)))
        for i, (_, head, end) in enumerate(marks):
            body = text[end : marks[i + 1][0] if i + 1 < len(marks) else len(text)].strip()
            out.append(Section(head[:120], body, abstract(body)))
        return [s for s in out if s.text] or out
    paras = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    for i in range(0, len(paras), 3):
        body = "\n\n".join(paras[i : i + 3])
        head = body.split("\n", 1)[0].strip()
        head = head if len(head.split()) <= 10 else " ".join(head.split()[:8]) + " …"
        out.append(Section(head, body, abstract(body)))
    return out


def document_nodes(uri: str, title: str, text: str) -> list[Node]:
    """docs/<folders>/<file> and one section node per section (text = the abstract)."""
    rel = PurePosixPath(uri.split(":", 1)[1] if ":" in uri else uri)
    kinds = ["folder"] * len(rel.parts[:-1]) + ["document"]
    nodes = ancestors(["folder", *kinds], ["docs", *rel.parts])
    doc = nodes[-1]
    secs = sections(title, text)
    doc.text = f"{title}: " + " / ".join(s.title for s in secs)
    doc.meta = {"summary": secs[0].abstract[:160] if secs else title, "title": title}
    for n in nodes[:-1]:
        n.meta = {"summary": "documents"}
    for i, s in enumerate(secs):
        nodes.append(
            Node(
                "section",
                s.title,
                f"{doc.path}/{i + 1:02d} {_seg(s.title)[:80]}",
                doc.path,
                i,
                text=f"{s.title}: {s.abstract}",
                meta={"summary": s.abstract[:160]},
            )
        )
    return nodes


def glossary_nodes(file_name: str, terms: list[TermRef]) -> list[Node]:
    nodes = ancestors(["folder", "glossary"], ["glossary", file_name])
    nodes[-1].meta = {"summary": f"{len(terms)} terms"}
    nodes[0].meta = {"summary": "glossaries"}
    for i, t in enumerate(terms):
        nodes.append(
            Node(
                "term",
                t.term,
                f"{nodes[-1].path}/{_seg(t.term)}",
                nodes[-1].path,
                i,
                text=t.text,
                refs=t.refs,
                meta={"summary": t.text[:160], "mapping": t.mapping},
            )
        )
    return nodes
