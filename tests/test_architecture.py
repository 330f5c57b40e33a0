"""The shape of the code, checked by reading it (docs/architecture.md): where SQL may be written and
which way imports may go. Cheaper than review, in the spirit of polarsource/polar's org-scope lint
(server/scripts/linters/org_scope.py): an AST walk over app/ and pipelines/, no import of the code.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SQL_CALLS = {"select", "insert", "update", "delete", "text"}

# Files that may build SQL besides every `repository*.py`: the engine/session plumbing (it binds the
# RLS settings) and migrations (alembic, outside app/).
SQL_ALLOWED = {"app/kit/database/db.py"}


def _sources(*tops: str) -> list[Path]:
    return sorted(p for top in tops for p in (ROOT / top).rglob("*.py"))


def _rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def _tree(p: Path) -> ast.Module:
    return ast.parse(p.read_text(), filename=str(p))


def _type_checking_only(tree: ast.Module) -> set[int]:
    """Line numbers of imports under `if TYPE_CHECKING:` (they never run)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                for n in ast.walk(sub):
                    lines.add(getattr(n, "lineno", -1))
    return lines


def _imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, module) of every import that runs, including the names imported from a package
    (`from app.memories import repository` gives `app.memories.repository`)."""
    skip = _type_checking_only(tree)
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def _sql_allowed(rel: str) -> bool:
    """A domain's `repository.py` / `repository_*.py`, or a module of its `repository/` package."""
    parts = Path(rel).parts
    in_package = len(parts) == 4 and parts[0] in ("app", "pipelines") and parts[2] == "repository"
    return Path(rel).name.startswith("repository") or in_package or rel in SQL_ALLOWED


def sql_in(p: Path, rel: str) -> list[str]:
    """SQL built in one file: calls of select/insert/update/delete/text (bare or as `sa.`), and
    imports of those names from SQLAlchemy (so that an alias is caught too)."""
    found = []
    for node in ast.walk(_tree(p)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in SQL_CALLS:
            found.append(f"{rel}:{node.lineno} {node.func.id}(")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in SQL_CALLS
            and ast.unparse(node.func.value) in ("sa", "sqlalchemy")
        ):
            found.append(f"{rel}:{node.lineno} {ast.unparse(node.func)}(")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy"):
            found += [f"{rel}:{node.lineno} imports {a.name} from {node.module}" for a in node.names if a.name in SQL_CALLS]
    return sorted(found, key=lambda f: int(f.split(":")[1].split(" ")[0]))


def sql_outside_repositories() -> list[str]:
    return [f for p in _sources("app", "pipelines") if not _sql_allowed(_rel(p)) for f in sql_in(p, _rel(p))]


def test_sql_lives_in_repositories():
    """select/insert/update/delete/text( only in repository*.py files or a repository/ package (and app/kit/database/db.py)."""
    assert sql_outside_repositories() == []


def test_the_lint_catches_sql(tmp_path):
    """The lint is not vacuous: statements written outside a repository are reported, method calls
    of the same name (`stats.update(...)`, `session.delete(row)`) are not."""
    planted = tmp_path / "service.py"
    planted.write_text(
        "import sqlalchemy as sa\nfrom sqlalchemy import select as s\n\ndef f(db, m, stats):\n"
        "    stats.update(a=1)\n    db.execute(sa.text('SELECT 1'))\n    return db.execute(select(m))\n"
    )
    assert sql_in(planted, "app/x/service.py") == [
        "app/x/service.py:2 imports select from sqlalchemy",
        "app/x/service.py:6 sa.text(",
        "app/x/service.py:7 select(",
    ]
    assert _sql_allowed("app/search/repository/bm25.py") and _sql_allowed("app/memories/repository_pipeline.py")
    assert not _sql_allowed("app/search/repository_helpers/x.py") and not _sql_allowed("app/kit/database/repository/x/y.py")
    assert not _sql_allowed("app/search/service.py")


NOT_DOMAINS = {"kit", "auth", "llm", "inference", "ui"}  # plumbing, the LLM gateway, the torch tier, a static page


def _domains() -> set[str]:
    return {p.name for p in (ROOT / "app").iterdir() if p.is_dir() and (p / "__init__.py").exists() and p.name not in NOT_DOMAINS}


def _layer(module: str) -> tuple[str, str] | None:
    """('memories', 'repository') for app.memories.repository / app.memories.repository_pipeline."""
    parts = module.split(".")
    if len(parts) >= 3 and parts[0] == "app":
        return parts[1], parts[2]
    return None


def violations_in(rel: str, tree: ast.Module, domains: set[str]) -> list[str]:
    """The import rules broken by one file (`rel`: its path from the repository root)."""
    bad = []
    own = rel.split("/")[1] if rel.startswith("app/") and rel.count("/") >= 2 else None
    for line, mod in _imports(tree):
        where = f"{rel}:{line} imports {mod}"
        layer = _layer(mod)
        if rel.startswith("app/") and (mod == "pipelines" or mod.startswith("pipelines.")):
            bad.append(f"{where} (the app never imports pipelines)")
        if (
            rel.startswith("pipelines/")
            and layer
            and layer[0] in domains
            and (layer[1] == "models" or layer[1].startswith("repository"))
        ):
            bad.append(f"{where} (pipelines call domain services, never models or repositories)")
        if rel.startswith("app/kit/") and rel not in KIT_WIRING and layer and layer[0] in domains:
            bad.append(f"{where} (app/kit is plumbing below every domain)")
        if own in domains and layer and layer[0] in domains and layer[0] != own and layer[1].startswith("repository"):
            bad.append(f"{where} (another domain's repository: call its service)")
        if (
            rel.endswith("/endpoints.py")
            and layer
            and layer[0] in domains
            and (layer[1] == "models" or layer[1].startswith("repository"))
        ):
            bad.append(f"{where} (endpoints call services)")
        # context's endpoint (the HTTP surface) may read a session for the request; its logic may not
        if rel.startswith("app/context/") and rel != "app/context/endpoints.py" and layer and layer[0] == "sessions":
            bad.append(f"{where} (sessions build on context, not the reverse)")
    return bad


def import_violations() -> list[str]:
    domains = _domains()
    return [v for p in _sources("app", "pipelines") for v in violations_in(_rel(p), _tree(p), domains)]


# app/kit modules that wire domains together by design: the model registry (imports every model
# so that the metadata is complete) and the request dependencies (a key resolves to a principal
# through app.orgs.service).
KIT_WIRING = {"app/kit/registry.py", "app/kit/http/deps.py"}


def test_imports_go_one_way():
    """endpoints -> services -> repositories -> models/kit; pipelines -> domain services; the app
    never imports pipelines; app/kit imports no domain (but its two wiring modules)."""
    assert import_violations() == []


def test_the_import_rules_catch_what_they_name():
    """Not vacuous: each rule reports a planted import, and an import under TYPE_CHECKING is free."""
    domains = _domains()

    def check(rel: str, src: str) -> list[str]:
        return [v.split(" (")[1].rstrip(")") for v in violations_in(rel, ast.parse(src), domains)]

    assert (
        check("pipelines/x/job.py", "from app.memories.models import Memory\n")
        == ["pipelines call domain services, never models or repositories"] * 2
    )
    assert (
        check("pipelines/x/job.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app.jobs.models import Job\n")
        == []
    )
    assert check("app/search/service.py", "import pipelines.distillation.steps\n") == ["the app never imports pipelines"]
    assert check("app/kit/text.py", "from app.orgs import models\n") == ["app/kit is plumbing below every domain"]
    assert check("app/erasure/service.py", "from app.memories import repository\n") == [
        "another domain's repository: call its service"
    ]
    assert check("app/memories/endpoints.py", "from app.memories.models import Memory\n") == ["endpoints call services"] * 2
    assert (
        check("app/context/service.py", "from app.sessions.service import session_pieces\n")
        == ["sessions build on context, not the reverse"] * 2
    )


# Domains without tables of their own: search and context query the item tables (through
# app/kit/registry.py); context builds on search and has no statements of its own; erasure calls
# the services of the domains it erases from.
NO_MODELS = {"search", "context", "erasure"}
NO_REPOSITORY = {"context", "erasure"}


@pytest.mark.parametrize("domain", sorted(_domains()))
def test_every_domain_has_the_same_files(domain):
    """A reader who knows one domain knows them all: service.py (logic), repository.py (all SQL),
    models.py (tables)."""
    have = {p.name for p in (ROOT / "app" / domain).glob("*.py")}
    if (ROOT / "app" / domain / "repository" / "__init__.py").exists():  # a repository split by concern
        have.add("repository.py")
    want = (
        {"service.py"}
        | ({"repository.py"} if domain not in NO_REPOSITORY else set())
        | ({"models.py"} if domain not in NO_MODELS else set())
    )
    assert sorted(want - have) == []


def test_no_module_over_400_lines():
    """God modules start small: a module of app/, pipelines/ or bench/ that passes 400 lines gets split."""
    long = {_rel(p): n for p in _sources("app", "pipelines", "bench") if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}


def _routes_without_response_model(source: str) -> list[str]:
    """`@router.<verb>(...)` decorators that name no response_model (204s and HTML/redirects,
    which have no JSON body, name a status_code=204 or a response_class instead)."""
    bad = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for d in fn.decorator_list:
            if not (
                isinstance(d, ast.Call)
                and isinstance(d.func, ast.Attribute)
                and isinstance(d.func.value, ast.Name)
                and d.func.value.id == "router"
                and d.func.attr in ("get", "post", "put", "patch", "delete")
            ):
                continue
            kw = {k.arg: k.value for k in d.keywords}
            no_body = isinstance(kw.get("status_code"), ast.Constant) and kw["status_code"].value == 204
            if "response_model" not in kw and "response_class" not in kw and not no_body and not _redirects(fn):
                bad.append(fn.name)
    return bad


def _redirects(fn: ast.FunctionDef) -> bool:
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "RedirectResponse" for n in ast.walk(fn))


def test_every_endpoint_has_a_response_model():
    """Clients and schemathesis read the OpenAPI schema: an endpoint returning a bare dict
    publishes no response shape."""
    bad = {
        _rel(p): names for p in (ROOT / "app").rglob("endpoints.py") if (names := _routes_without_response_model(p.read_text()))
    }
    assert bad == {}


def test_the_response_model_check_catches_a_bare_dict():
    planted = '@router.get("/x")\ndef x() -> dict:\n    return {"a": 1}\n'
    assert _routes_without_response_model(planted) == ["x"]
    assert _routes_without_response_model(planted.replace('"/x"', '"/x", response_model=X')) == []


# The unit of the two-way rule: a package under app/ (app/memories/...), or a module directly under
# app/ (app/cli.py, app/main.py). An import of another package's `models` module does not count: the
# tables are the schema, one layer below every domain's code (a repository may join another
# domain's table, as search and context query every item table), so reading one is not a use of
# that domain's logic. The kit's wiring modules (KIT_WIRING) import domains by design.
# The plumbing below every domain is one layer whose parts may use each other: app/kit, the
# principal every kit helper filters by (app/auth) and the settings (app/config.py).
# An endpoints module is the HTTP layer above every service (only app/main.py imports it): it may
# compose several domains' services (POST /v1/context reads a session and builds a context), so its
# imports are not edges of the service graph this rule keeps acyclic.
PLUMBING = {"kit", "auth", "config"}


def _unit(rel: str) -> str | None:
    """The package (or top-level module) of app/ that a file belongs to."""
    parts = rel[: -len(".py")].split("/")
    return parts[1] if parts[0] == "app" and len(parts) >= 2 else None


def _imported_unit(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "app" or len(parts) < 2 or (len(parts) >= 3 and parts[2] == "models"):
        return None
    return parts[1]


def package_edges(files: dict[str, ast.Module]) -> dict[tuple[str, str], str]:
    """{(importer, imported): the first import that makes the edge} between units of app/."""
    edges: dict[tuple[str, str], str] = {}
    for rel, tree in sorted(files.items()):
        src = _unit(rel)
        if src is None or rel in KIT_WIRING or rel.endswith("/endpoints.py"):
            continue
        for line, mod in _imports(tree):
            dst = _imported_unit(mod)
            if dst is not None and dst != src and not {src, dst} <= PLUMBING:
                edges.setdefault((src, dst), f"{rel}:{line} imports {mod}")
    return edges


def two_way_imports(files: dict[str, ast.Module]) -> list[str]:
    """Pairs of units of app/ that import each other, each with one import of either direction."""
    edges = package_edges(files)
    return [f"{a} <-> {b}: {edges[(a, b)]}; {edges[(b, a)]}" for a, b in sorted(edges) if a < b and (b, a) in edges]


def test_no_two_way_imports_between_packages():
    """Domain packages, app/kit (but its wiring modules) and the command-line modules import each
    other one way only: what orchestrates several domains (erasure, app/erasure/) sits above them,
    what every domain uses (idempotency, app/kit/http/idempotency.py) below them."""
    assert two_way_imports({_rel(p): _tree(p) for p in _sources("app")}) == []


def test_the_two_way_rule_catches_a_cycle():
    """Not vacuous: a lazy import back is a cycle too; a table, the wiring modules and the plumbing
    layer are not."""

    def cycles(**files: str) -> list[str]:
        return [
            c.split(":")[0]
            for c in two_way_imports({rel.replace("__", "/") + ".py": ast.parse(src) for rel, src in files.items()})
        ]

    assert cycles(
        app__cli="def f():\n    from app.branches.cli import branch\n", app__branches__cli="from app.cli import _fail\n"
    ) == ["branches <-> cli"]
    assert cycles(
        app__episodes__service="from app.orgs import service\n",
        app__orgs__service="from app.episodes.service import ids_owned_by\n",
    ) == ["episodes <-> orgs"]
    assert (
        cycles(
            app__search__repository="from app.episodes.models import Episode\n",
            app__episodes__service="from app.search import lexicon\n",
        )
        == []
    )
    assert (
        cycles(
            app__kit__registry="from app.memories.models import Memory\nfrom app.memories import service\n",
            app__memories__service="from app.kit.database.db import every_scope\n",
        )
        == []
    )
    assert (
        cycles(
            app__kit__access="from app.auth.principal import Principal\n",
            app__auth__principal="from app.kit.tenancy.view import View\n",
        )
        == []
    )
    assert cycles(app__kit__text="from app.memories import service\n", app__memories__service="from app.kit.text import x\n") == [
        "kit <-> memories"
    ]


def module_level_imports_of(top: str, tree: ast.Module) -> list[int]:
    """Lines of imports of package `top` that run when the module is imported (not inside a function)."""
    lines = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for n in ast.walk(node):
            names = (
                [a.name for a in n.names]
                if isinstance(n, ast.Import)
                else [n.module or ""]
                if isinstance(n, ast.ImportFrom) and n.level == 0
                else []
            )
            if any(name == top or name.startswith(top + ".") for name in names):
                lines.append(n.lineno)
    return lines


def test_the_app_loads_bench_only_when_a_bench_command_runs():
    """bench/ builds on app/; `memscale bench ...` (app/bench_cli.py) imports a benchmark inside the
    command that runs it, so that importing app/ never imports bench/."""
    found = {_rel(p): lines for p in _sources("app") if (lines := module_level_imports_of("bench", _tree(p)))}
    assert found == {}
    assert module_level_imports_of("bench", ast.parse("import bench.x\ndef f():\n    from bench import y\n")) == [1]


MAX_POSITIONAL = 6
# Functions that mirror the API and take its parameters as they are: the public client, the MCP
# tools and FastAPI endpoint functions (a route decorator).
POSITIONAL_EXEMPT_FILES = ("app/client_types.py", "app/mcp_server.py")  # and every app/client*.py: the public client


def _is_endpoint(fn: ast.FunctionDef) -> bool:
    return any(
        isinstance(d, ast.Call)
        and isinstance(d.func, ast.Attribute)
        and d.func.attr in ("get", "post", "put", "patch", "delete", "api_route", "websocket")
        for d in fn.decorator_list
    )


def too_many_positional(rel: str, tree: ast.Module) -> list[str]:
    """`file:function` for every function of one file that takes more than MAX_POSITIONAL
    positional parameters (`self`/`cls` not counted; keyword-only ones are free)."""
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or _is_endpoint(fn):
            continue
        names = [a.arg for a in fn.args.posonlyargs + fn.args.args]
        if names and names[0] in ("self", "cls"):
            names = names[1:]
        if len(names) > MAX_POSITIONAL:
            out.append(f"{rel}:{fn.name}")
    return out


def positional_offenders() -> set[str]:
    return {
        o
        for p in _sources("app")
        if _rel(p) not in POSITIONAL_EXEMPT_FILES and not _rel(p).startswith("app/client")
        for o in too_many_positional(_rel(p), _tree(p))
    }


def test_no_function_takes_more_than_six_positional_parameters():
    """Values that travel together are one carried object or keyword-only parameters: a reader
    follows names instead of counting positions."""
    assert sorted(positional_offenders()) == []


def test_the_positional_rule_catches_a_parameter_train():
    planted = ast.parse(
        "def f(a, b, c, d, e, g, h):\n    pass\n\ndef g(a, b, c, d, e, f, *, h):\n    pass\n\n"
        "class C:\n    def m(self, a, b, c, d, e, f):\n        pass\n\n"
        "@router.post('/x')\ndef x(a, b, c, d, e, f, g):\n    pass\n"
    )
    assert too_many_positional("app/x/service.py", planted) == ["app/x/service.py:f"]


def test_the_instruction_readers_import_one_way():
    """The LLM's reading builds on the rules' (app/search/instruction_llm.py imports
    instruction.py); the rules never reach back, not even inside a function."""
    mods = {mod for _, mod in _imports(_tree(ROOT / "app/search/instruction.py"))}
    assert not {m for m in mods if m.startswith("app.search.instruction_llm")}
