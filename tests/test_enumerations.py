"""One table per enumeration: item types (app/kit/items.py), job kinds (app/jobs/kinds.py) and the
inference tier's context modes (app/inference/modes.py). No other module writes out a list of their
names (an AST walk over app/ and pipelines/), and what the API, the CLI, the client and the MCP
tools publish is the table, in the order the API has always published it."""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import typing
from pathlib import Path

import click

from app import cli, client_types
from app.inference.modes import MODE_NAMES, MODES
from app.jobs import cli as jobs_cli
from app.jobs import runner
from app.jobs.kinds import BRANCHABLE, JOB_KINDS, KIND_NAMES
from app.kit.items import BRANCH_TYPES, ITEM_NAMES, ITEM_TYPES, RETAINED_TYPES, SEARCH_TYPES, SOURCE_TYPES

ROOT = Path(__file__).resolve().parents[1]
TABLES = {"app/kit/items.py", "app/jobs/kinds.py", "app/inference/modes.py"}
ENUMERATIONS = {"item types": set(ITEM_NAMES), "job kinds": set(KIND_NAMES), "inference modes": set(MODE_NAMES)}
# Copies in the search and context domains, which are being redesigned elsewhere: each is checked
# against the table below (test_search_publishes_the_table) until it reads SEARCH_TYPES.
PENDING: set[str] = set()


def copies_in(rel: str, tree: ast.AST) -> list[str]:
    """Every tuple, list, set, dict or Literal[...] holding three or more names of one enumeration."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            elts = node.elts
        elif isinstance(node, ast.Dict):
            elts = [k for k in node.keys if k is not None]
        else:
            continue
        words = {e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        out += [(node.lineno, name) for name, names in ENUMERATIONS.items() if len(words & names) >= 3]
    return [f"{rel}:{line} {name}" for line, name in sorted(out)]


def test_no_enumeration_is_written_out_twice():
    found = []
    for p in sorted(p for top in ("app", "pipelines") for p in (ROOT / top).rglob("*.py")):
        rel = p.relative_to(ROOT).as_posix()
        if rel not in TABLES and rel not in PENDING:
            found += copies_in(rel, ast.parse(p.read_text(), filename=rel))
    assert found == []


def test_the_copy_check_catches_copies():
    """Not vacuous: the shapes the enumerations used to be copied in are reported; two names are not."""
    planted = (
        'Kind = Literal["bootstrap", "distill", "consolidate", "train_cartridge", "retention"]\n'
        'PIPELINES = {"bootstrap": "a", "distill": "b", "consolidate": "c"}\n'
        'for t in ("memory", "episode", "chunk"):\n    pass\n'
        'mode: Literal["blend", "full", "prefix", "reuse"] = "blend"\n'
        'pair = ["memory", "episode"]\n'
    )
    assert copies_in("x.py", ast.parse(planted)) == [
        "x.py:1 job kinds",
        "x.py:2 job kinds",
        "x.py:3 item types",
        "x.py:5 inference modes",
    ]


def test_each_item_type_names_a_model_with_its_columns():
    for name, t in ITEM_TYPES.items():
        columns = t.model.__table__.columns
        assert t.time_col in columns and (t.text_col is None or t.text_col in columns), name


def test_the_published_lists_keep_their_order():
    """The API's enums as clients have always seen them (values and order): the table reproduces them."""
    assert ITEM_NAMES == ("episode", "memory", "chunk", "asset", "cartridge")
    assert SOURCE_TYPES == ("episode", "memory", "chunk", "asset")
    assert SEARCH_TYPES == ("memory", "episode", "chunk")
    assert BRANCH_TYPES == ("memory", "episode", "asset")
    assert RETAINED_TYPES == ("episode",)
    assert KIND_NAMES == ("bootstrap", "distill", "consolidate", "train_cartridge", "retention", "train_manager", "reembed")
    assert set(BRANCHABLE) == {"bootstrap", "distill", "consolidate"}
    assert MODE_NAMES == ("blend", "full", "prefix", "reuse")
    assert [n for n, m in MODES.items() if not m.stored_kv] == ["full"]


def _enum(schema: dict) -> list:
    return schema["enum"] if "enum" in schema else _enum(schema["items"])


def test_the_api_publishes_the_tables(app):
    doc = app.openapi()
    schemas = doc["components"]["schemas"]
    lineage = doc["paths"]["/v1/lineage/{item_type}/{item_id}"]["get"]["parameters"]
    assert _enum(next(p for p in lineage if p["name"] == "item_type")["schema"]) == list(ITEM_NAMES)
    assert _enum(schemas["SourceRef"]["properties"]["type"]) == list(SOURCE_TYPES)
    assert _enum(schemas["Change"]["properties"]["type"]) == list(BRANCH_TYPES)
    assert _enum(schemas["Promoted"]["properties"]["type"]) == ["memory", "episode"]
    assert _enum(schemas["JobIn"]["properties"]["kind"]) == list(KIND_NAMES)
    per_kind = {
        rule["if"]["properties"]["kind"]["const"]: rule["then"]["properties"]["params"]["title"]
        for rule in schemas["JobIn"]["allOf"]
    }
    assert per_kind == {n: k.params.__name__ for n, k in JOB_KINDS.items()}


def test_search_publishes_the_table(app):
    from app.search.schemas import SearchIn
    from app.sessions.tools import ArchivalArgs

    search_in = app.openapi()["components"]["schemas"]["SearchIn"]["properties"]["types"]
    assert _enum(search_in) == SearchIn.model_fields["types"].default_factory() == list(SEARCH_TYPES)
    assert _enum(ArchivalArgs.model_json_schema()["properties"]["types"]) == list(SEARCH_TYPES)


def test_the_inference_wire_format_publishes_the_modes():
    from app.inference.schemas import GenerateIn

    assert _enum(GenerateIn.model_json_schema()["properties"]["mode"]) == list(MODE_NAMES)


def test_the_runner_reads_the_job_table():
    assert runner.PIPELINES == {n: k.pipeline for n, k in JOB_KINDS.items()}
    assert runner.DEFAULT_SCHEDULES == {"distill": 3600, "consolidate": 86400, "retention": 86400}
    for kind in JOB_KINDS.values():
        assert importlib.util.find_spec(kind.pipeline.split(":")[0]) is not None, kind.name


def _choices(command: click.Command, param: str) -> tuple:
    return tuple(next(p for p in command.params if p.name == param).type.choices)


def test_the_cli_and_the_client_offer_the_tables():
    assert _choices(jobs_cli.jobs.commands["run"], "kind") == KIND_NAMES
    assert _choices(cli.admin.commands["set-retention"], "kind") == RETAINED_TYPES
    assert typing.get_args(client_types.JobKind) == KIND_NAMES
    assert typing.get_args(client_types.ItemType) == SEARCH_TYPES


def test_the_mcp_search_tool_offers_the_table():
    from app.mcp_server import build_server, rest_client_factory

    tools = {t.name: t for t in asyncio.run(build_server(rest_client_factory("http://127.0.0.1:9")).list_tools())}
    types = tools["search"].input_schema["properties"]["types"]
    assert _enum(next(s for s in types["anyOf"] if s.get("type") == "array")) == list(SEARCH_TYPES)
