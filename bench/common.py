"""Shared benchmark plumbing: a fresh database in the embedded server, an in-process API on
loopback, percentiles, and result files."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

RESULTS = Path(__file__).resolve().parent / "results"


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as /proc/loadavg gives them: the machine is shared."""
    return " ".join(open("/proc/loadavg").read().split()[:3])


def database_settings(name: str):
    """Settings pointing at database `name` on the server (embedded unless MEMSCALE_DATABASE_URL),
    as its owner; nothing is created or migrated."""
    from app.config import Settings
    from app.kit.database.pg import admin_url

    base = Settings()
    return base.model_copy(update={"database_url": make_url(admin_url(base)).set(database=name).render_as_string(False)})


def _server():
    """An autocommit engine on the server's own database (CREATE / DROP DATABASE)."""
    from app.config import Settings
    from app.kit.database.pg import admin_url

    return create_engine(admin_url(Settings()), isolation_level="AUTOCOMMIT")


def fresh_database(name: str, *, migrate: bool = True):
    """Settings pointing at a new database `name` (embedded server unless MEMSCALE_DATABASE_URL),
    migrated to head unless `migrate` is False (a process of another commit migrates it itself)."""
    from app.kit.database.migrate import upgrade

    s = database_settings(name)
    eng = _server()
    with eng.connect() as c:
        c.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        c.execute(text(f"CREATE DATABASE {name}"))
    eng.dispose()
    if migrate:
        upgrade(s, "head")
    return s


def main_dump(eng, org_id) -> dict:
    """md5 of every main row of the org, per branched table (app/kit/tenancy/repository_view.py VIEWED: the
    memory state and the knowledge), row text in primary-key order: work in a branch must leave
    it unchanged byte for byte."""
    import hashlib

    from app.kit.tenancy.repository_view import VIEWED

    out = {}
    with eng.connect() as c:
        for t in VIEWED:
            rows = c.execute(
                text(f"SELECT t::text FROM {t} t WHERE org_id = :o AND branch_id IS NULL ORDER BY id"), {"o": org_id}
            ).scalars()
            h, n = hashlib.md5(), 0
            for r in rows:
                h.update(r.encode())
                n += 1
            out[t] = {"rows": n, "md5": h.hexdigest()}
    return out


def existing_database(name: str):
    """Settings pointing at database `name` if it exists (migrated to head), else None: for a
    bench that reuses what an earlier run of itself built."""
    from app.kit.database.migrate import upgrade

    s = database_settings(name)
    eng = _server()
    with eng.connect() as c:
        found = c.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).scalar()
    eng.dispose()
    if not found:
        return None
    upgrade(s, "head")
    return s


def free_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def serve_in_thread(app, *, lifespan: str = "auto") -> str:
    """Run the app with uvicorn on a free loopback port; return its base URL. `lifespan="off"`
    for an app a TestClient already started (a second start would replace its state)."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan=lifespan))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():  # its startup failed (uvicorn logged why)
            raise RuntimeError(f"the app did not start on port {port}: see the log above")
        time.sleep(0.05)
    return f"http://127.0.0.1:{port}"


ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def worktree(rev: str | None) -> Iterator[Path | None]:
    """A detached git worktree of `rev` (an earlier commit to measure beside this checkout) in a
    temporary folder, removed afterwards; None for no `rev`."""
    import shutil
    import subprocess
    import tempfile

    if rev is None:
        yield None
        return
    tmp = Path(tempfile.mkdtemp(prefix="msworktree"))
    path = tmp / "old"
    try:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), rev], check=True)
        yield path
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], check=False)
        shutil.rmtree(tmp, ignore_errors=True)


def arm_row(times: dict[str, list[float]], digits: int = 1) -> dict:
    """p50 / p95 / n per arm of a side-by-side run, and the new / old ratios when both ran."""
    row: dict = {
        n: {"p50_ms": round(pct(v, 50), digits), "p95_ms": round(pct(v, 95), digits), "n": len(v)} for n, v in times.items()
    }
    if "old" in row and "new" in row:
        row["p50_ratio"] = round(row["new"]["p50_ms"] / row["old"]["p50_ms"], 3)
        row["p95_ratio"] = round(row["new"]["p95_ms"] / row["old"]["p95_ms"], 3)
    return row


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    i = min(len(v) - 1, max(0, int(round(q / 100 * (len(v) - 1)))))
    return v[i]


def summary_ms(values_s: list[float]) -> dict:
    ms = [x * 1000 for x in values_s]
    return {"p50_ms": round(pct(ms, 50), 2), "p95_ms": round(pct(ms, 95), 2), "p99_ms": round(pct(ms, 99), 2), "n": len(ms)}


# bench.command.save under the signatures of the commands not yet moved to bench.command (the LoCoMo
# commands and tools/scale_compare.py); new commands call save directly.


def write_report(result: dict, out_dir: Path, name: str, markdown: str, plot) -> None:
    """`<name>.json`, `<name>.md` and `<name>.png` (drawn by `plot(result, path)`) under `out_dir`."""
    from bench.command import save

    save(Path(out_dir) / f"{name}.json", result, markdown, plot)


def report(out: str | Path, result: dict, markdown: str) -> dict:
    """A bench's end: its table to stdout, figures and table to `out` and beside it as `.md`."""
    from bench.command import save

    return save(out, result, markdown)


def write_result(name: str, data: dict, out: str | Path | None = None) -> Path:
    """bench/results/`name`.json, or the path `out` (a bench's `--out`) when given."""
    from bench.command import save

    path = Path(out) if out else RESULTS / f"{name}.json"
    save(path, data, echo=False)
    return path


class ApiProcess:
    """`python -m app serve` on a free loopback port as its own process (own GIL; killable)."""

    def __init__(self, settings, *, env: dict | None = None, log_path: Path | None = None, cwd: Path | None = None):
        """`cwd`: the checkout whose code serves (bench.tools.service_overhead runs an earlier commit's)."""
        import os
        import subprocess
        import sys

        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        full_env = {
            **os.environ,
            "MEMSCALE_DATABASE_URL": settings.database_url,
            "MEMSCALE_DATA_DIR": str(settings.data_dir),
            "MEMSCALE_LOG_LEVEL": "WARNING",
            **(env or {}),
        }
        out = open(log_path, "wb") if log_path else subprocess.PIPE
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            env=full_env,
            stdout=subprocess.DEVNULL if log_path is None else out,
            stderr=subprocess.STDOUT if log_path else out,
            cwd=cwd,
        )
        self._log = out if log_path else None

    def _tail(self) -> str:
        return self.proc.stderr.read().decode(errors="replace")[-3000:] if self.proc.stderr else ""

    def wait_ready(self, timeout: float = 120) -> None:
        import httpx

        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the API exited with {self.proc.returncode}: {self._tail()}")
            try:
                if httpx.get(f"{self.base}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError("the API did not become ready")

    def kill9(self) -> None:
        import signal

        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        import signal
        import subprocess

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        for f in (self.proc.stderr, self._log):
            if f:
                f.close()
