"""Optuna storage for a study (journal file or a database) and the lock that serialises asking.

Journal file (default results/<name>/journal.log): an fcntl lock on results/<name>/.ask.lock.
PostgreSQL (shared by workers on many hosts): a session-level advisory lock keyed by the study
name; schema creation on a fresh database is serialised by another advisory lock.
"""
from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path

from dse.errors import ConfigError
from dse.study.spec import Study

def check_journal(path: Path, study_name: str) -> None:
    """ConfigError unless `path` is absent, empty, or an Optuna journal holding this study: a study
    never appends to a user's other file or to another study's journal."""
    import json
    if not path.exists():
        return
    if not path.is_file():
        raise ConfigError(f"storage: {path} is not a file; give journal:PATH of a journal file")
    names, first = set(), True
    with open(path, "rb") as fh:
        for line in fh:
            try:
                op = json.loads(line)
            except ValueError:
                op = None
            if first and not (isinstance(op, dict) and "op_code" in op):
                raise ConfigError(f"storage: {path} exists and is not an Optuna journal; choose another path")
            first = False
            if isinstance(op, dict) and "study_name" in op:
                names.add(op["study_name"])
    if names and study_name not in names:
        raise ConfigError(f"storage: {path} is the journal of {', '.join(sorted(names))}, not of '{study_name}'; "
                          "choose another path")


def redact(url: str | None) -> str | None:
    if not url or "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    cred, host = rest.rsplit("@", 1)
    user = cred.split(":", 1)[0]
    return f"{scheme}://{user}@{host}"


def _normal_url(url: str) -> str:
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def open_storage(st: Study, out: Path):
    """(Optuna storage, lock context factory). ConfigError if a URL is unreachable or unknown."""
    import optuna
    url = st.storage
    if url is None or url.startswith("journal:") or url.endswith(".log"):
        from optuna.storages.journal import JournalStorage

        from dse.study.journal import JournalFile
        path = Path(url.split(":", 1)[1]) if url and url.startswith("journal:") else \
            Path(url) if url else out / "journal.log"
        check_journal(path, st.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        storage = JournalStorage(JournalFile(path))
        lockfile = path.parent / ".ask.lock"
        return storage, lambda: _file_lock(lockfile)
    url = _normal_url(url)
    if not url.startswith(("postgresql", "mysql", "sqlite")):
        raise ConfigError(f"storage: '{redact(url)}' is not a supported URL; use postgresql+psycopg://user@host:port/db "
                          "or leave it out for the journal file under results/<study>/")
    import sqlalchemy
    kwargs = {"pool_pre_ping": True}
    if url.startswith("postgresql"):
        kwargs["connect_args"] = {"connect_timeout": 5}
    try:
        eng = sqlalchemy.create_engine(url, **kwargs)
        with eng.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT 1"))
    except Exception as exc:  # noqa: BLE001 - any driver error means: cannot use this storage
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"storage: cannot reach {redact(url)} ({first[:160]}); check host, port, "
                          "user and that the server is running") from None
    if url.startswith("postgresql"):  # workers starting together on a fresh database: one creates the schema
        with _pg_lock(eng, 0x647365_0001):
            storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
    else:
        storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
    if url.startswith("postgresql"):
        key = int(hashlib.sha256(("dse-study:" + st.name).encode()).hexdigest()[:15], 16)
        return storage, lambda: _pg_lock(eng, key)
    return storage, lambda: contextlib.nullcontext()


@contextlib.contextmanager
def _file_lock(path: Path):
    import fcntl
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def _pg_lock(engine, key: int):
    import sqlalchemy
    with engine.connect() as conn:
        conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": key})
        conn.commit()
        try:
            yield
        finally:
            conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
            conn.commit()

