"""Seeded synthetic analytics "spaces": an SQLite database with opaque names, a glossary, expert
schema docs, and question intents with gold SQL and the knowledge keys each one needs.

Every space has an entity table (customers, accounts, ...) and an event table (orders,
invoices, ...) with opaque table/column names (``t_k81``, ``c_q2``) and opaque codes for regions,
segments and the cancelled status. Knowledge a question can need:

- mappings (space-specific): measure column, date column, join, region/segment/status codes;
- conventions (org-wide, implicit: in no schema doc): the fiscal year starts on 1 February
  (SQL idiom ``date(col, '-1 month')``), an active customer had an event in the 90 days to the
  reporting date (``date('2024-12-31', '-90 day')``), measures exclude cancelled records
  (``<status> <> '<code>'``).

A key is found in a text when one of its marker strings occurs (case and whitespace ignored);
gold SQL always writes keys in the marker form, so any example or glossary line that carries a
key carries its marker. Conventions' markers are the same in every space: an example from one
space teaches the convention for all (cross-space knowledge).
"""

from __future__ import annotations

import csv
import random
import re
import sqlite3
import string
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path

REPORT_DATE = "2024-12-31"
DOMAINS = [  # key, entity, entities, event, events, measure phrase
    ("retail", "customer", "customers", "order", "orders", "revenue"),
    ("billing", "account", "accounts", "invoice", "invoices", "billed amount"),
    ("support", "client", "clients", "ticket", "tickets", "handling minutes"),
    ("logistics", "store", "stores", "shipment", "shipments", "freight cost"),
    ("marketing", "lead", "leads", "campaign touch", "campaign touches", "spend"),
]
REGIONS = ["EMEA", "APAC", "North America", "LATAM"]
SEGMENTS = ["enterprise", "mid-market", "small business"]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
CONVENTIONS = {  # key -> (markers, plain statement)
    "fiscal_quarter": (
        ["'-1 month'"],
        "Quarters and years are fiscal: the fiscal year starts on 1 February, so "
        "shift dates with date(col, '-1 month') before taking year or quarter.",
    ),
    "active": (
        ["'-90 day'"],
        "An active {entity} had at least one {event} in the 90 days up to the reporting date "
        f"{REPORT_DATE}: date('{REPORT_DATE}', '-90 day').",
    ),
}


def norm(text: str) -> str:
    return re.sub(r"\s+", "", text).lower()


@dataclass
class Question:
    space: str
    template: str
    params: dict
    sql: str
    keys: dict[str, list[str]]  # key id -> marker alternatives
    text: str = ""
    gold: list[tuple] = field(default_factory=list)

    @property
    def intent(self) -> str:
        """Template + parameters: two questions with one intent have the same gold SQL."""
        return f"{self.space}:{self.template}:" + ",".join(str(v) for v in self.params.values())


@dataclass
class Space:
    name: str
    domain: tuple
    path: Path
    t: dict[str, str]  # role -> opaque table name
    c: dict[str, str]  # role -> opaque column name (unqualified)
    region_code: dict[str, str]
    segment_code: dict[str, str]
    cancelled: str
    intents: list[Question] = field(default_factory=list)

    def col(self, role: str) -> str:
        table = "e" if role in ("eid", "fk", "dt", "amt", "st") else "c"
        return f"{self.t[table]}.{self.c[role]}"

    def keys(self, *names: str, region: str | None = None, segment: str | None = None) -> dict[str, list[str]]:
        """Knowledge keys (id -> marker alternatives) by name: measure, date, join, net, cancelled,
        region, segment (space-specific) and the org-wide conventions fiscal_quarter, active."""
        e, c = self.col("fk"), self.col("id")
        table = {
            "measure": [self.col("amt")],
            "date": [self.col("dt")],
            "join": [f"{e} = {c}", f"{c} = {e}", f"{e} references {c}"],
            "net": [f"{self.col('st')} <> '{self.cancelled}'"],
            "cancelled": [f"{self.col('st')} = '{self.cancelled}'"],
        }
        out: dict[str, list[str]] = {}
        for n in names:
            if n in CONVENTIONS:
                out[f"conv:{n}"] = CONVENTIONS[n][0]
            elif n == "region":
                out[f"{self.name}:region:{region}"] = [f"{self.col('rg')} = '{self.region_code[region]}'"]
            elif n == "segment":
                out[f"{self.name}:segment:{segment}"] = [f"{self.col('sg')} = '{self.segment_code[segment]}'"]
            else:
                out[f"{self.name}:{n}"] = table[n]
        return out

    def glossary_rows(self) -> list[tuple[str, str, str]]:
        """Explicit business terms (what a data team writes down): mappings only, no conventions."""
        d = self.domain
        rows = [
            (d[2], f"the {d[2]} table", self.t["c"]),
            (d[4], f"the {d[4]} table", self.t["e"]),
            (d[5], f"the {d[5]} of one {d[3]}", self.col("amt")),
            (f"{d[3]} date", f"when the {d[3]} happened", self.col("dt")),
            (f"{d[3]} {d[1]}", f"the {d[1]} of a {d[3]}", f"{self.col('fk')} = {self.col('id')}"),
            ("cancelled", f"a cancelled {d[3]}", f"{self.col('st')} = '{self.cancelled}'"),
        ]
        rows += [(r, f"{d[2]} in the {r} region", f"{self.col('rg')} = '{code}'") for r, code in self.region_code.items()]
        rows += [(s, f"{s} {d[2]}", f"{self.col('sg')} = '{code}'") for s, code in self.segment_code.items()]
        return rows

    def expert_doc(self) -> str:
        """Hand-written schema documentation for this space (no implicit conventions)."""
        d = self.domain
        lines = [
            f"Space {self.name} ({d[0]}).",
            f"Table {self.t['c']} holds {d[2]}: {self.col('id')} id, "
            f"{self.col('rg')} region code, {self.col('sg')} segment code.",
            f"Table {self.t['e']} holds {d[4]}: {self.col('eid')} id, {self.col('fk')} {d[1]} id "
            f"(join {self.col('fk')} = {self.col('id')}), {self.col('dt')} date, {self.col('amt')} {d[5]}, "
            f"{self.col('st')} status ({self.col('st')} = '{self.cancelled}' means cancelled).",
            "Regions: " + "; ".join(f"{r}: {self.col('rg')} = '{c}'" for r, c in self.region_code.items()) + ".",
            "Segments: " + "; ".join(f"{s}: {self.col('sg')} = '{c}'" for s, c in self.segment_code.items()) + ".",
        ]
        return "\n".join(lines)


def _opaque(rng: random.Random, prefix: str, used: set[str]) -> str:
    while True:
        name = prefix + rng.choice(string.ascii_lowercase) + "".join(rng.choices(string.ascii_lowercase + string.digits, k=2))
        if name not in used:
            used.add(name)
            return name


def _codes(rng: random.Random, prefix: str, names: list[str]) -> dict[str, str]:
    nums = rng.sample(range(1, 10), len(names))
    return {n: f"{prefix}{k}" for n, k in zip(names, nums)}


def make_space(rng: random.Random, i: int, folder: Path, used: set[str]) -> Space:
    domain = DOMAINS[i % len(DOMAINS)]
    name = f"{domain[0]}_{rng.choice(['north', 'south', 'east', 'west', 'core', 'prime'])}{i}"
    t = {"c": _opaque(rng, "t_", used), "e": _opaque(rng, "t_", used)}
    c = {role: _opaque(rng, "c_", used) for role in ("id", "rg", "sg", "eid", "fk", "dt", "amt", "st")}
    sp = Space(
        name,
        domain,
        folder / f"{name}.sqlite",
        t,
        c,
        _codes(rng, "R", REGIONS),
        _codes(rng, "S", SEGMENTS),
        rng.choice(["X", "CNL", "VOID", "C9", "ZZ"]),
    )
    _fill_database(rng, sp)
    sp.intents = _intents(sp)
    with sqlite3.connect(sp.path) as db:
        for q in sp.intents:
            q.gold = db.execute(q.sql).fetchall()
    return sp


def _fill_database(rng: random.Random, sp: Space) -> None:
    t, c = sp.t, sp.c
    with sqlite3.connect(sp.path) as db:
        db.execute(f"CREATE TABLE {t['c']} ({c['id']} INTEGER PRIMARY KEY, {c['rg']} TEXT NOT NULL, {c['sg']} TEXT NOT NULL)")
        db.execute(
            f"CREATE TABLE {t['e']} ({c['eid']} INTEGER PRIMARY KEY, {c['fk']} INTEGER NOT NULL "
            f"REFERENCES {t['c']}({c['id']}), {c['dt']} TEXT NOT NULL, {c['amt']} REAL NOT NULL, {c['st']} TEXT NOT NULL)"
        )
        n_ent = 60
        for k in range(1, n_ent + 1):
            db.execute(
                f"INSERT INTO {t['c']} VALUES (?, ?, ?)",
                (k, rng.choice(list(sp.region_code.values())), rng.choice(list(sp.segment_code.values()))),
            )
        start, days = date(2023, 1, 1), (date(2025, 1, 31) - date(2023, 1, 1)).days
        for k in range(1, 901):
            status = sp.cancelled if rng.random() < 0.12 else rng.choice(["OK", "DONE"])
            ent = rng.randint(1, n_ent) if k > n_ent else k
            db.execute(
                f"INSERT INTO {t['e']} VALUES (?, ?, ?, ?, ?)",
                (k, ent, (start + timedelta(days=rng.randint(0, days))).isoformat(), round(rng.uniform(5, 500), 2), status),
            )


PHRASES = {
    "fq_total": [
        "What was the total {measure} in Q{q} {y}?",
        "Total {measure} for quarter {q} of {y}?",
        "How much {measure} did we book in Q{q} {y}?",
    ],
    "region_count": [
        "How many {events} came from {region} {entities} in {y}?",
        "Number of {events} by {region} {entities} during calendar year {y}?",
        "Count the {events} placed by {entities} in {region} in {y}.",
    ],
    "active_region": [
        "How many active {entities} are in {region}?",
        "Count of active {entities} in the {region} region?",
        "How many {region} {entities} are active right now?",
    ],
    "segment_avg": [
        "What is the average {measure} per {event} for {segment} {entities} in {month} {y}?",
        "Average {measure} of {segment} {entities}' {events} in {month} {y}?",
        "Mean {measure} per {event} among {segment} {entities}, {month} {y}?",
    ],
    "top_region": [
        "Which region code had the highest {measure} in Q{q} {y}?",
        "Top region code by {measure} for Q{q} {y}?",
        "In Q{q} {y}, which region code led on {measure}?",
    ],
    "cancel_count": [
        "How many {events} were cancelled in {month} {y}?",
        "Number of cancelled {events} in {month} {y}?",
        "Count cancelled {events} for {month} {y}.",
    ],
}


def _intents(sp: Space) -> list[Question]:
    E, C = sp.t["e"], sp.t["c"]
    amt, dt, st, fk, idc, rg, sg = (sp.col(r) for r in ("amt", "dt", "st", "fk", "id", "rg", "sg"))
    net = f"{st} <> '{sp.cancelled}'"
    join = f"{E} JOIN {C} ON {fk} = {idc}"
    fy = f"strftime('%Y', date({dt}, '-1 month'))"
    fq = f"(CAST(strftime('%m', date({dt}, '-1 month')) AS INTEGER) + 2) / 3"
    out: list[Question] = []

    def add(template: str, params: dict, sql: str, keys: dict) -> None:
        out.append(Question(sp.name, template, params, sql, keys))

    for y in (2023, 2024):
        for q in (1, 2, 3, 4):
            add(
                "fq_total",
                {"q": q, "y": y},
                f"SELECT ROUND(SUM({amt}), 2) FROM {E} WHERE {net} AND {fy} = '{y}' AND {fq} = {q}",
                sp.keys("measure", "date", "net", "fiscal_quarter"),
            )
            add(
                "top_region",
                {"q": q, "y": y},
                f"SELECT {rg} FROM {join} WHERE {net} AND {fy} = '{y}' AND {fq} = {q} "
                f"GROUP BY {rg} ORDER BY SUM({amt}) DESC LIMIT 1",
                sp.keys("measure", "join", "net", "fiscal_quarter"),
            )
        for r in REGIONS:
            add(
                "region_count",
                {"region": r, "y": y},
                f"SELECT COUNT(*) FROM {join} WHERE {rg} = '{sp.region_code[r]}' AND strftime('%Y', {dt}) = '{y}'",
                sp.keys("join", "region", "date", region=r),
            )
    for r in REGIONS:
        add(
            "active_region",
            {"region": r},
            f"SELECT COUNT(DISTINCT {idc}) FROM {join} WHERE {rg} = '{sp.region_code[r]}' "
            f"AND {dt} > date('{REPORT_DATE}', '-90 day') AND {dt} <= '{REPORT_DATE}'",
            sp.keys("join", "region", "active", region=r),
        )
    for s in SEGMENTS:
        for m in (3, 6, 9, 11):
            add(
                "segment_avg",
                {"segment": s, "month": MONTHS[m - 1], "y": 2024},
                f"SELECT ROUND(AVG({amt}), 2) FROM {join} WHERE {net} AND {sg} = '{sp.segment_code[s]}' "
                f"AND strftime('%Y-%m', {dt}) = '2024-{m:02d}'",
                sp.keys("measure", "join", "segment", "date", "net", segment=s),
            )
    for m in (2, 5, 8, 10):
        add(
            "cancel_count",
            {"month": MONTHS[m - 1], "y": 2024},
            f"SELECT COUNT(*) FROM {E} WHERE {st} = '{sp.cancelled}' AND strftime('%Y-%m', {dt}) = '2024-{m:02d}'",
            sp.keys("cancelled", "date"),
        )
    return out


def phrase(rng: random.Random, sp: Space, intent: Question) -> Question:
    """A new question with `intent`'s SQL and keys, in one of the template's wordings."""
    d = sp.domain
    words = {"measure": d[5], "entities": d[2], "event": d[3], "events": d[4], **intent.params}
    text = rng.choice(PHRASES[intent.template]).format(**words)
    return Question(sp.name, intent.template, intent.params, intent.sql, intent.keys, text, intent.gold)


def write_glossary(sp: Space, folder: Path, parts: int = 1) -> list[Path]:
    """The space's glossary as CSV (term, meaning, mapping), split into `parts` files."""
    rows = sp.glossary_rows()
    paths = []
    for p in range(parts):
        path = folder / f"{sp.name}_glossary_{p + 1}.csv"
        with path.open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["term", "meaning", "mapping"])
            w.writerows(rows[p::parts])
        paths.append(path)
    return paths


def found_keys(text: str, keys: dict[str, list[str]]) -> set[str]:
    t = norm(text)
    return {k for k, alts in keys.items() if any(norm(a) in t for a in alts)}
