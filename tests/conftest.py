"""Shared pytest fixtures.

postgres_url: a throwaway PostgreSQL server on loopback for the session (RECIPES.md): initdb and
pg_ctl from Debian's /usr/lib/postgresql/*/bin, run as the `postgres` user when we are root
(the server refuses to run as root). Skips with the reason only where no server binary exists
(CI installs the package in .ci/run, so the tests run there).
"""
from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run and machine (the suite is deterministic): a
# counterexample shows up wherever the suite runs, not on one CI machine's random draw.
settings.register_profile("dse", derandomize=True, database=None)
settings.load_profile("dse")


def _pg_bin() -> str | None:
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: [int(x) if x.isdigit() else x for x in d.split("/")])
    for d in reversed(dirs):
        if os.path.exists(os.path.join(d, "initdb")) and os.path.exists(os.path.join(d, "pg_ctl")):
            return d
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb and shutil.which("pg_ctl") else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _unavailable(reason: str):
    # CI installs the server and sets DSE_REQUIRE_POSTGRES=1: there a missing server is a failure.
    if os.environ.get("DSE_REQUIRE_POSTGRES") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_url():
    bindir = _pg_bin()
    if bindir is None:
        _unavailable("no PostgreSQL server binary (initdb/pg_ctl) on this machine; "
                    "install Debian's `postgresql` package (.ci/run does)")
    root = os.geteuid() == 0
    prefix = ["runuser", "-u", "postgres", "--"] if root else []
    if root:
        try:
            import pwd
            pwd.getpwnam("postgres")
        except KeyError:
            _unavailable("running as root but there is no `postgres` user to run the server as")
    d = tempfile.mkdtemp(prefix="dse-pg-")
    os.chmod(d, 0o755)
    if root:
        shutil.chown(d, "postgres")
    data, log, port = os.path.join(d, "data"), os.path.join(d, "log"), _free_port()
    subprocess.run(prefix + [f"{bindir}/initdb", "-D", data, "-A", "trust", "-U", "dse"],
                   check=True, capture_output=True)
    r = subprocess.run(prefix + [f"{bindir}/pg_ctl", "-D", data, "-l", log, "-w", "-o",
                                 f"-k {d} -p {port} -c listen_addresses=127.0.0.1", "start"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"pg_ctl start failed: {r.stderr or r.stdout}\n{open(log).read() if os.path.exists(log) else ''}")
    try:
        yield f"postgresql+psycopg://dse@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(prefix + [f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"],
                       capture_output=True)
        shutil.rmtree(d, ignore_errors=True)


# ---- measured kernel tables (../shared/data/kernels; the files stay outside the project) --------
KERNELS = os.environ.get("DSE_KERNELS") or os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "kernels")


@pytest.fixture(scope="session")
def kernels_dir() -> str:
    if not os.path.isdir(KERNELS):
        pytest.skip(f"no measured kernel tables at {KERNELS} (set DSE_KERNELS to their directory)")
    return os.path.abspath(KERNELS)


@pytest.fixture(scope="session")
def all_fits(kernels_dir):
    """Every family's fits on every GPU, computed once per test session."""
    from dse.calibrate.run import calibrate
    return calibrate(kernels_dir)


@pytest.fixture(scope="session")
def data(kernels_dir):
    """The measured kernel tables (dse.calibrate.tables.KernelData)."""
    from dse.calibrate.tables import KernelData
    return KernelData(kernels_dir)


# the GPU folders of ../shared/data/kernels
KERNEL_GPUS = ["a100_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300", "h100_sxm", "h200_sxm"]


def of(all_fits, family: str, gpu: str) -> list:
    """The fits of one family on one GPU, from the session's `all_fits`."""
    return [f for f in all_fits if f.family == family and f.gpu == gpu]
