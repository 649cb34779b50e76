"""One writer per dataset: an fcntl lock on `<sidecar>/.lock`, held while a sweep writes. The kernel
releases it when its process dies, so a lock left by a killed sweep never blocks the next one."""
from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from dse.errors import ConfigError
from dse.store.manifest import sidecar


@contextlib.contextmanager
def writer_lock(dataset, wait: bool = False):
    """Hold the dataset's writer lock; ConfigError (one line) if another process holds it and
    `wait` is false."""
    side = sidecar(Path(dataset))
    side.mkdir(parents=True, exist_ok=True)
    fd = os.open(side / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
            raise ConfigError(f"{dataset}: another dse sweep ({holder}) is writing this dataset; wait for it "
                              "to finish or choose another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def process_alive(pid: int) -> bool:
    """Whether a process of this host still runs (one owned by another user counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
