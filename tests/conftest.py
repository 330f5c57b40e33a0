"""Tests run against the real embedded PostgreSQL (18, pgvector 0.8: app/kit/database/embedded_pg.py), migrated with alembic.

One fresh database per test session (`memscale_test`) in the embedded server; every test makes
its own orgs, so tests are independent of order. The API runs in-process (TestClient) as the
`memscale_app` role, so row-level security is in force exactly as in production.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if "MEMSCALE_MODEL_CACHE_DIR" not in os.environ:  # the ONNX export of the embedder: this session only
    _MODEL_CACHE = tempfile.mkdtemp(prefix="memscale-model-cache-")
    os.environ["MEMSCALE_MODEL_CACHE_DIR"] = _MODEL_CACHE
    atexit.register(shutil.rmtree, _MODEL_CACHE, True)

pytest_plugins = ["tests.console_browser"]  # the console tests' browser, server and tabs

# One database per pytest-xdist worker (`make test` runs two): each worker migrates its own, and
# every test makes its own orgs, so workers never see each other's rows.
TEST_DB = "memscale_test" + (f"_{os.environ['PYTEST_XDIST_WORKER']}" if os.environ.get("PYTEST_XDIST_WORKER") else "")


def pytest_collection_modifyitems(items):
    """schemathesis names one item per API operation (`test_openapi_conformance[GET /healthz]`),
    but under pytest 9.2 they all get the bare function's node id. pytest-xdist keys its work by
    node id, so all but one operation would silently not run (33 of 34 did not, the first time
    `make test` ran two workers): give each its operation back."""
    from _pytest.nodeid import NodeId

    for item in items:
        label = getattr(item, "operation_label", None)
        if label and not item.nodeid.endswith("]"):
            item._id = NodeId.parse(f"{item.nodeid}[{label}]")
    seen: set[str] = set()
    twice = {i.nodeid for i in items if i.nodeid in seen or seen.add(i.nodeid)}
    if twice:
        raise pytest.UsageError(f"test items share a node id (under xdist only one would run): {sorted(twice)}")


@pytest.fixture(scope="session")
def settings():
    from app.config import Settings
    from app.kit.database.pg import admin_url

    base = Settings()
    if os.environ.get("MEMSCALE_TEST_DATABASE_URL"):
        url = os.environ["MEMSCALE_TEST_DATABASE_URL"]
    else:
        server_url = admin_url(base)  # starts the embedded server and keeps it for the session
        eng = create_engine(server_url, isolation_level="AUTOCOMMIT")
        with eng.connect() as c:
            c.execute(text(f"DROP DATABASE IF EXISTS {TEST_DB} WITH (FORCE)"))
            c.execute(text(f"CREATE DATABASE {TEST_DB}"))
        eng.dispose()
        url = make_url(server_url).set(database=TEST_DB).render_as_string(hide_password=False)
    s = base.model_copy(update={"database_url": url})
    from app.kit.database.migrate import upgrade

    upgrade(s, "head")  # the workers' migrations may run at once (the server-wide role tolerates it)
    return s


@pytest.fixture(scope="session")
def admin_engine(settings):
    from app.kit.database.pg import admin_url

    eng = create_engine(admin_url(settings))
    yield eng
    eng.dispose()


@pytest.fixture(scope="session")
def embedder():
    from app.kit.runtime.embedding import LocalEmbedder

    return LocalEmbedder()


@pytest.fixture(scope="session")
def app(settings, embedder):
    from app.main import create_app

    return create_app(settings, embedder=embedder)


@pytest.fixture(scope="session")
def client(app):
    from fastapi.testclient import TestClient

    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@dataclass
class Actor:
    org: str
    org_id: uuid.UUID
    name: str
    user_id: uuid.UUID
    key: str

    @property
    def h(self) -> dict:
        return {"Authorization": f"Bearer {self.key}"}


class World:
    """Factory: orgs and users with keys (through the same service the admin CLI uses)."""

    def __init__(self, engine, audit_key: bytes | None = None):
        self.engine = engine
        self.info = {"audit_key": audit_key}  # the admin CLI seals its audit events too
        self.orgs: dict[str, uuid.UUID] = {}

    def org(self, name: str | None = None) -> str:
        from app.orgs import service

        name = name or f"org-{uuid.uuid4().hex[:8]}"
        with Session(self.engine, info=self.info) as db:
            self.orgs[name] = service.create_org(db, name).id
            db.commit()
        return name

    def user(self, org: str, name: str | None = None, *, roles=(), groups=(), clearances=()) -> Actor:
        from app.orgs import service

        name = name or f"user-{uuid.uuid4().hex[:6]}"
        with Session(self.engine, info=self.info) as db:
            o = service.org_by_name(db, org)
            u = service.create_user(db, o, name, roles=roles, groups=groups, clearances=clearances)
            key = service.create_key(db, u)
            db.commit()
            return Actor(org=org, org_id=o.id, name=name, user_id=u.id, key=key)


@pytest.fixture
def world(admin_engine, settings):
    return World(admin_engine, settings.audit_secret())


def episode(content: str = "the deploy failed because the cache was cold", **kw) -> dict:
    return {"kind": "note", "content": content, **kw}


@pytest.fixture
def here(settings, tmp_path):
    """The service's settings with its data dir (where jobs write cartridges) under tmp; the same
    keys, so handoff tokens and operator calls still verify."""
    return settings.model_copy(update={"data_dir": tmp_path / "data", "inference_key": settings.inference_secret().decode()})


@pytest.fixture
def swap_state():
    """``swap_state(app.state, name, value)`` for one test, restored after it. (pytest's monkeypatch
    cannot restore an attribute of a Starlette ``State``: its undo deletes it.)"""
    done = []

    def swap(state, name: str, value) -> None:
        done.append((state, name, getattr(state, name)))
        setattr(state, name, value)

    yield swap
    for state, name, old in reversed(done):
        setattr(state, name, old)


@pytest.fixture
def run_job(settings, app, embedder, client):
    """Create and run a job in the foreground, as `memscale jobs run` does; returns the Job row."""
    from app.jobs import service as jobs_service
    from app.jobs.runner import JobContext, Resources
    from app.jobs.runner import run_job as _run
    from app.kit.database.db import bind_principal

    def _go(
        org_id,
        kind: str,
        params: dict | None = None,
        *,
        created_by=None,
        gateway=None,
        branch: str | None = None,
        with_settings=None,
    ):
        from app.branches import service as branches

        sessions = app.state.sessions
        with sessions() as db:
            bind_principal(db, None, org_id=org_id, all_scopes=True)
            branch_id = branches.view_named(db, org_id, branch).branch_id
            job = jobs_service.create(
                db, org_id=org_id, actor_id=created_by, kind=kind, params=params or {}, status="running", branch_id=branch_id
            )
            db.commit()
            job_id = job.id
        s = with_settings or settings  # e.g. another data dir
        res = Resources(s, _embedder=embedder, _gateway=gateway)
        return _run(JobContext(settings=s, sessions=sessions, org_id=org_id, job_id=job_id, resources=res))

    return _go
