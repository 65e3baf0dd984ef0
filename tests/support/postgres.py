"""A private PostgreSQL cluster for tests: initdb and pg_ctl in a temporary folder.

The cluster listens on 127.0.0.1 only (a free port) and on a unix socket inside its own folder,
with a random password, so nothing else on the machine can reach it by accident. It is made
once per test session (`tests/service/conftest.py`); each test gets a fresh database in it.

PostgreSQL refuses to run as root, so under root the server binaries run as the `postgres`
user that Debian's package creates (or `nobody`) through `runuser`, the folder handed to it.
The binaries are found on PATH, else where Debian installs them (/usr/lib/postgresql/N/bin).
No test here.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.service import free_port

SUPERUSER = "arenaplan"
START_TIMEOUT_S = 60


class PostgresUnavailable(Exception):
    """This machine cannot run a private cluster; the message says why and what to install."""


def find_bin_dir() -> Path:
    """The folder holding initdb and pg_ctl: PATH first, then Debian's newest version."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(on_path).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                      key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit()
                      else 0)
    if versions:
        return versions[-1].parent
    raise PostgresUnavailable("PostgreSQL's initdb and pg_ctl are not installed (Debian: "
                              "apt-get install postgresql; .ci/run does it)")


def _server_user() -> str | None:
    """Who runs the server binaries: None (ourselves) unless we are root."""
    if os.geteuid() != 0:
        return None
    if shutil.which("runuser") is None:
        raise PostgresUnavailable("running as root, PostgreSQL needs another user, and runuser "
                                  "(util-linux) is not installed to switch to one")
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise PostgresUnavailable("running as root, and neither a 'postgres' nor a 'nobody' user "
                              "exists to run PostgreSQL as")


class PostgresCluster:
    """One running cluster; `url(name)` is the SQLAlchemy URL of a database in it."""

    def __init__(self) -> None:
        self.bin_dir = find_bin_dir()
        self.run_as = _server_user()
        self.root = Path(tempfile.mkdtemp(prefix="arenaplan-pg-"))
        self.data = self.root / "data"
        self.sockets = self.root / "sockets"
        self.password = secrets.token_hex(16)
        self.port = 0

    def url(self, database: str = "postgres") -> str:
        return (f"postgresql+psycopg://{SUPERUSER}:{self.password}@127.0.0.1:{self.port}/"
                f"{database}")

    def _run(self, *args: str, timeout: float = START_TIMEOUT_S) -> None:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self.run_as:
            command = ["runuser", "-u", self.run_as, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              cwd=self.root)
        if done.returncode != 0:
            raise PostgresUnavailable(f"{args[0]} failed ({done.returncode}): "
                                      f"{(done.stderr or done.stdout).strip()[-2000:]}")

    def start(self) -> PostgresCluster:
        self.sockets.mkdir()
        password_file = self.root / "password"
        password_file.write_text(self.password + "\n")
        if self.run_as:
            user = pwd.getpwnam(self.run_as)
            for path in (self.root, self.sockets, password_file):
                os.chown(path, user.pw_uid, user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "--auth=scram-sha-256",
                  f"--pwfile={password_file}", "--encoding=UTF8", "--locale=C", "--no-sync")
        password_file.unlink()
        for _ in range(3):  # the free port may be taken between finding and binding it
            self.port = free_port()
            options = (f"-p {self.port} -k {self.sockets} -c listen_addresses=127.0.0.1 "
                       "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
            try:
                self._run("pg_ctl", "start", "-w", "-t", str(START_TIMEOUT_S), "-D",
                          str(self.data), "-l", str(self.root / "server.log"), "-o", options)
                return self
            except PostgresUnavailable:
                if "already in use" not in self.log():
                    self.stop()
                    raise
        self.stop()
        raise PostgresUnavailable("no free port for PostgreSQL after 3 tries")

    def log(self) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """Stop the server (fast: clients are disconnected) and delete the cluster."""
        try:
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "stop", "-w", "-m", "fast", "-D", str(self.data))
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def create_database(self, name: str) -> str:
        self._admin(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, name: str) -> None:
        self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _admin(self, statement: str) -> None:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user=SUPERUSER,
                             password=self.password, dbname="postgres",
                             autocommit=True) as connection:
            connection.execute(statement)
