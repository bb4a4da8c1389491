"""A throwaway PostgreSQL 17 cluster and a real gunicorn server on it, for fault tests.

The shared cluster (scripts/pg.sh, port 5433) is never stopped: other tests run on it. This
one lives in a temporary directory, listens on a free loopback port, and is set up the way
scripts/pg.sh sets up the project's cluster (owner and application roles, the extensions,
migrations run as the owner), so that it can be stopped, restarted and starved at will.

A small disk, honestly: the cluster runs in a private mount namespace (`unshare -m`, which
only root may make) where a tmpfs of a chosen size is mounted; the engram database lives in a
tablespace on it, the WAL on the ordinary disk (a separate WAL volume, as many deployments
have). Shrinking the tmpfs to what is used gives the server real ENOSPC errors on the data
volume; growing it back is "space returns". The mount is invisible outside the namespace and
goes away with the cluster.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[2]
PG_BIN = Path("/usr/lib/postgresql/17/bin")
BIN = ROOT / ".venv" / "bin"
EXTENSIONS = ("vector", "age", "pg_trgm", "btree_gin")
OWNER, APP, DB = "engram_owner", "engram_app", "engram"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_postgres(*command: str | Path) -> list[str]:
    """PostgreSQL refuses to run as root: run its tools as the postgres system user."""
    args = [str(part) for part in command]
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


class PrivateCluster:
    """initdb'd in a temporary directory; `start`, `stop(mode)`, `sql` as the superuser."""

    def __init__(self, extra_conf: str = "") -> None:
        self.home = Path(tempfile.mkdtemp(prefix="engram-faults-"))
        self.data = self.home / "data"
        self.volume = self.home / "volume"  # the tmpfs of the database's tablespace
        self.volume.mkdir()
        # Holds the private mount namespace open; every server command runs inside it.
        self.holder = subprocess.Popen(
            [shutil.which("unshare") or "unshare", "-m", "--propagation", "private", "sleep",
             "infinity"]
        )  # fmt: skip
        self.log = self.home / "postgres.log"
        self.port = free_port()
        self.extra_conf = extra_conf
        self.owner_password = secrets.token_hex(16)
        self.app_password = secrets.token_hex(16)
        try:
            self._wait_for_namespace()
            self._in_namespace("mount", "-t", "tmpfs", "-o", "size=512m,mode=0700", "tmpfs",
                               self.volume)  # fmt: skip
            self.volume_used()  # checks that the volume is the tmpfs
            if os.geteuid() == 0:
                self._in_namespace("chown", "postgres:postgres", self.home, self.volume)
            self.home.chmod(0o700)
        except BaseException:
            self.remove()
            raise

    def _wait_for_namespace(self) -> None:
        """Until unshare has made the new namespace and exec'd sleep in it: entering the pid
        before that would mount the volume in everyone's namespace."""
        ours = os.readlink("/proc/self/ns/mnt")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                comm = Path(f"/proc/{self.holder.pid}/comm").read_text().strip()
                if comm == "sleep" and os.readlink(f"/proc/{self.holder.pid}/ns/mnt") != ours:
                    return
            time.sleep(0.01)
        raise RuntimeError("unshare did not make a mount namespace")

    def _in_namespace(self, *command: str | Path) -> str:
        return subprocess.run(
            [shutil.which("nsenter") or "nsenter", "-t", str(self.holder.pid), "-m", "--",
             *map(str, command)],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip

    def _postgres(self, *command: str | Path) -> None:
        """A PostgreSQL tool, as the postgres user, inside the namespace."""
        self._in_namespace(*_as_postgres(*command))

    def volume_used(self) -> int:
        """Bytes used on the database's volume."""
        out = self._in_namespace("df", "-B1", "--output=fstype,used", self.volume)
        fstype, used = out.split()[-2:]
        if fstype != "tmpfs":  # the volume must be the small mount, never the host's disk
            raise RuntimeError(f"the database volume is on {fstype}, not the private tmpfs")
        return int(used)

    def resize_volume(self, size: int) -> None:
        """Set the volume's size in bytes (below what is used, it refuses)."""
        self._in_namespace("mount", "-o", f"remount,size={size}", self.volume)

    def url(self, role: str) -> str:
        password = self.owner_password if role == OWNER else self.app_password
        return f"postgresql://{role}:{password}@127.0.0.1:{self.port}/{DB}"

    def initdb(self) -> None:
        self._postgres(PG_BIN / "initdb", "-D", self.data, "-U", "postgres", "-E", "UTF8",
                       "--locale=C.UTF-8", "--auth-local=trust", "--auth-host=scram-sha-256",
                       "--no-sync")  # fmt: skip
        conf = f"""
listen_addresses = '127.0.0.1'
port = {self.port}
unix_socket_directories = '{self.home}'
unix_socket_permissions = 0700
max_connections = 40
shared_buffers = '64MB'
logging_collector = off
log_statement = 'none'
log_min_error_statement = panic
log_error_verbosity = terse
{self.extra_conf}
"""
        with (self.data / "postgresql.conf").open("a") as handle:
            handle.write(conf)

    def start(self) -> None:
        self._postgres(PG_BIN / "pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "60",
                       "start")  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        self._postgres(PG_BIN / "pg_ctl", "-D", self.data, "-m", mode, "-w", "-t", "60", "stop")

    def running(self) -> bool:
        try:
            self._postgres(PG_BIN / "pg_ctl", "-D", self.data, "status")
        except subprocess.CalledProcessError:
            return False
        return True

    def connect(self, dbname: str = DB) -> psycopg.Connection[Any]:
        return psycopg.connect(
            host=str(self.home), port=self.port, user="postgres", dbname=dbname, autocommit=True
        )

    def sql(self, statement: str, params: Any = None, dbname: str = DB) -> list[tuple[Any, ...]]:
        """Run one statement as the superuser (RLS does not apply); its rows, if any."""
        with self.connect(dbname) as conn, conn.cursor() as cursor:
            cursor.execute(statement, params)
            return cursor.fetchall() if cursor.description else []

    def bootstrap(self) -> None:
        """Roles, database and extensions as scripts/pg.sh makes them."""
        with self.connect("postgres") as conn:
            conn.execute(
                f"CREATE ROLE {OWNER} LOGIN CREATEDB NOSUPERUSER NOBYPASSRLS "
                f"PASSWORD '{self.owner_password}'"
            )
            conn.execute(
                f"CREATE ROLE {APP} LOGIN NOCREATEDB NOCREATEROLE NOSUPERUSER NOBYPASSRLS "
                f"PASSWORD '{self.app_password}'"
            )
            conn.execute(f"CREATE TABLESPACE volume LOCATION '{self.volume}'")
            conn.execute(f"CREATE DATABASE {DB} OWNER {OWNER} TABLESPACE volume")
        with self.connect(DB) as conn:
            for extension in EXTENSIONS:
                conn.execute(f"CREATE EXTENSION IF NOT EXISTS {extension}")
            conn.execute(f"GRANT USAGE ON SCHEMA ag_catalog TO {OWNER}, {APP}")

    def remove(self) -> None:
        try:
            if self.data.exists() and self.running():
                self.stop("immediate")
        finally:
            self.holder.kill()  # the namespace, and its mount, go with its last process
            self.holder.wait()
            shutil.rmtree(self.home, ignore_errors=True)


def app_env(cluster: PrivateCluster, **extra: str) -> dict[str, str]:
    """The environment of an engram process (manage.py, gunicorn) on the private cluster."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "ENGRAM_"))}
    env.update(
        ENGRAM_ENV="local",
        DATABASE_URL=cluster.url(APP),
        DATABASE_OWNER_URL=cluster.url(OWNER),
        ENGRAM_DB_APP_ROLE=APP,
        ENGRAM_SECRET_KEY=secrets.token_hex(32),
        ENGRAM_API_RATE="off",
        ENGRAM_LOG_LEVEL="WARNING",
    )
    env.update(extra)
    return env


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [str(BIN / "python"), "manage.py", *args], cwd=ROOT, env=env, check=True,
        capture_output=True, text=True,
    )  # fmt: skip
    return done.stdout


def migrate_and_mint_key(cluster: PrivateCluster, env: dict[str, str]) -> str:
    """Migrate as the owner (as `make migrate` does); mint a key as the app; the raw key."""
    manage({**env, "DATABASE_URL": cluster.url(OWNER)}, "migrate", "--no-input", "-v", "0")
    out = manage(env, "create_api_key", "--org", "faults", "--project", "main", "--name", "f1")
    return out.strip().splitlines()[-1]


class Server:
    """gunicorn with config/gunicorn_conf.py, as scripts/run.sh starts it."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (log_dir / "gunicorn.log").open("ab")
        self.process = subprocess.Popen(
            [str(BIN / "gunicorn"), "-c", "config/gunicorn_conf.py", "--bind",
             f"127.0.0.1:{self.port}"],
            cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def wait_ready(self, key: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.process.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                reply = httpx.get(
                    f"{self.url}/v1/ping/", headers={"Authorization": f"Token {key}"}, timeout=5
                )
                if reply.status_code == 200:
                    return
            time.sleep(0.2)
        raise TimeoutError("gunicorn did not answer /v1/ping/")

    def stop(self) -> None:
        if self.process.poll() is None:
            # A quick shutdown: a test may leave a worker stuck in a request on purpose.
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()


@contextlib.contextmanager
def private_stack(extra_conf: str = "") -> Iterator[tuple[PrivateCluster, Server, str]]:
    """A migrated private cluster, an API key on it, and gunicorn serving it."""
    cluster = PrivateCluster(extra_conf)
    server = None
    try:
        cluster.initdb()
        cluster.start()
        cluster.bootstrap()
        env = app_env(cluster)
        # gunicorn needs no database to boot (its workers load the embedding model): start it
        # first, so that the model loads while the migrations run.
        server = Server(env, cluster.home)
        key = migrate_and_mint_key(cluster, env)
        server.wait_ready(key)
        yield cluster, server, key
    finally:
        if server is not None:
            server.stop()
        cluster.remove()
