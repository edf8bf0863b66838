"""A throwaway PostgreSQL server for tests: a new cluster in a temporary folder, reachable only
through a Unix socket in that folder, stopped and deleted at the end.

The binaries come from Debian's `postgresql` package (`make setup` installs it). PostgreSQL
refuses to run as root, so under root the server runs as `nobody`; the tests, as root, still
reach its socket.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

# Enough for a few tuner processes; no durability needed for a server that lives one test module.
SETTINGS = {
    "listen_addresses": "''",  # no TCP: the socket below only
    "max_connections": "40",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}
SUPERUSER = "tvk"


def server_bin_dir() -> Path | None:
    """The newest PostgreSQL's bin folder (Debian keeps initdb and pg_ctl off PATH), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path and shutil.which("initdb") else None


class PostgresServer:
    def __init__(self, bin_dir: Path):
        self.bin_dir = bin_dir
        # also the socket's folder: a short path (sockets have 108 bytes) that `nobody` can reach; in
        # memory where there is a tmpfs (deleting a cluster's files from a busy disk took seconds)
        memory = "/dev/shm"
        self.root = Path(tempfile.mkdtemp(prefix="tvk-pg-", dir=memory if os.access(memory, os.W_OK) else "/tmp"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.user = "nobody" if os.geteuid() == 0 else None
        self.databases = 0
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bin_dir / tool), *args]
        if self.user:
            runuser = shutil.which("runuser", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin") or "runuser"
            cmd = [runuser, "-u", self.user, "--", *cmd]
        done = subprocess.run(cmd, cwd=self.root, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            log = self.log.read_text() if self.log.is_file() else ""
            raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}{done.stderr}{log}")

    def start(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "--auth=trust", "--no-sync", "-E", "UTF8",
                  "--locale=C")
        settings = {**SETTINGS, "unix_socket_directories": f"'{self.root}'"}
        with open(self.data / "postgresql.conf", "a") as f:
            f.writelines(f"{k} = {v}\n" for k, v in settings.items())
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def create_database(self) -> str:
        """A new empty database; returns its SQLAlchemy URL (driver psycopg 3, through the socket)."""
        self.databases += 1
        name = f"tvk{self.databases}"
        subprocess.run([str(self.bin_dir / "createdb"), "-h", str(self.root), "-U", SUPERUSER, name], check=True,
                       capture_output=True, timeout=60)
        return f"postgresql+psycopg://{SUPERUSER}@/{name}?host={self.root}"
