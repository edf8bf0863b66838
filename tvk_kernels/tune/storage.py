"""Where the studies live: an Optuna RDB storage, SQLite in the cache folder by default, or a
server (PostgreSQL) that several workers share.

Every worker beats a heartbeat into the storage while it runs a trial, so the trial of a worker
that was killed (SIGKILL, a lost machine) is marked FAIL by the next worker once two beats are
missed, instead of staying RUNNING forever. Opening a storage turns the driver's and the
server's errors into one line that says what to do.
"""
from __future__ import annotations

import time
import warnings

from ..paths import cache_dir

HEARTBEAT_SECONDS = 10  # a killed worker's running trial is marked FAIL 2 beats after its last one

# the module SQLAlchemy imports for a URL -> the pip package that provides it
DRIVER_PACKAGES = {"psycopg": "psycopg[binary]", "psycopg2": "psycopg2-binary", "pymysql": "PyMySQL",
                   "MySQLdb": "mysqlclient"}


class StorageError(RuntimeError):
    """The study storage cannot be opened; the message says why and what to do."""


def default_storage() -> str:
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        why = "it is a file" if folder.is_file() else e.strerror or e
        raise StorageError(f"the default study storage's folder {folder} cannot be made ({why}); "
                           "set TVK_CACHE_DIR to a writable folder, or pass --storage") from None
    return f"sqlite:///{folder / 'tuning.sqlite3'}"


def shown(url: str) -> str:
    """The URL as it can be printed: its password hidden."""
    import sqlalchemy  # lazy: sqlalchemy comes with optuna, an optional dependency

    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except sqlalchemy.exc.ArgumentError:
        return url


def open_storage(url: str, heartbeat: int = HEARTBEAT_SECONDS):
    """An Optuna RDBStorage for `url`, with a heartbeat every `heartbeat` seconds."""
    import optuna  # lazy: optuna, an optional dependency (pip install torchvk[tune]), loads only to tune
    import sqlalchemy  # lazy: sqlalchemy comes with optuna

    if heartbeat < 1:
        raise StorageError(f"the heartbeat interval (--heartbeat) must be a whole number of seconds >= 1, not "
                           f"{heartbeat}")
    for attempt in range(5):
        try:
            with warnings.catch_warnings():  # the heartbeat is marked experimental
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(url, heartbeat_interval=heartbeat)
        except ImportError as e:
            cause = e.__cause__ or e  # Optuna's ImportError wraps the driver's
            module = getattr(cause, "name", None)
            if module is None:
                raise StorageError(f"study storage {shown(url)}: its database driver fails to import: "
                                   f"{cause}") from None
            raise StorageError(f"study storage {shown(url)} needs the Python module {module!r}, which is not "
                               f"installed: pip install '{DRIVER_PACKAGES.get(module, module)}'") from None
        except sqlalchemy.exc.ArgumentError as e:
            raise StorageError(f"study storage {shown(url)!r} is not a database URL SQLAlchemy knows ({e}); "
                               "examples: sqlite:///path/tuning.sqlite3, "
                               "postgresql+psycopg://user:password@host/database") from None
        except sqlalchemy.exc.OperationalError as e:
            reason = " ".join(str(e.orig or e).split())
            reason += "" if reason.endswith((".", "?")) else "."
            check = ("that its folder exists and is writable" if url.startswith("sqlite") else
                     "that the server runs and that the URL's host, port, user, password and database are right")
            raise StorageError(f"cannot open study storage {shown(url)}: {reason} Check {check}.") from None
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError) as e:
            # workers that start together on an empty database race to create Optuna's tables and
            # version rows; the losers' try fails, and a new one finds them made
            if attempt == 4:
                reason = " ".join(str(e.orig or e).split())
                raise StorageError(f"cannot set up Optuna's tables in study storage {shown(url)}: {reason}. "
                                   "Does the user in the URL have the right to create tables there?") from None
            time.sleep(0.2 * (attempt + 1))
        except sqlalchemy.exc.DatabaseError as e:  # after its subclasses above: not a database at all
            reason = " ".join(str(e.orig or e).split())
            raise StorageError(f"study storage {shown(url)} cannot be read as a database ({reason}); pass another "
                               "--storage, or move that file away and a new one is made") from None
        except RuntimeError as e:  # Optuna: tables of another Optuna version (its message says what to run)
            raise StorageError(f"study storage {shown(url)}: {e}") from None
