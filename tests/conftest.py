"""Shared fixtures: the real default device (the Intel OpenCL CPU runtime in CI), never a mock.

Tests that need Intel's offline compiler carry the ``ocloc`` marker, tests that open a page in Debian's headless
chromium the ``browser`` marker; this is the one place that decides whether they run: where the tool is missing
they are skipped with what to install (``make test`` installs both itself when run as root)."""

import glob
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile

import pytest

from xegemm.aot.toolchain import find_ocloc
from xegemm.runtime import describe, select_sycl_device

# Built programs go to a cache of this session, never the user's.  The process that starts the session makes
# it; pytest-xdist's workers and CLI subprocesses inherit it through the environment, so a kernel built by one
# worker is loaded by the others (the cache is safe between processes: xegemm.runtime.program_cache).
_SESSION_CACHE = "XEGEMM_TEST_SESSION_CACHE"
if os.environ.get("PYTEST_XDIST_WORKER") and os.path.isdir(os.environ.get(_SESSION_CACHE, "")):
    os.environ["XEGEMM_CACHE_DIR"] = os.environ[_SESSION_CACHE]
else:
    _CACHE = tempfile.TemporaryDirectory(prefix="xegemm-test-programs-")
    os.environ["XEGEMM_CACHE_DIR"] = os.environ[_SESSION_CACHE] = _CACHE.name

# The timing loops' floors, shorter for the whole session (workers and CLI subprocesses inherit it): the tests
# check what a measurement records and decides, not the speed they measure, and the default floors (100 ms of
# warm-up a side, 20 ms rounds after 50 ms pauses) made most of the run and tune tests' time.  The method itself,
# at its default floors, is tested in tests/test_profile.py, which clears this.
os.environ.setdefault("XEGEMM_PACE", "warmup_ms=10,round_ms=2,settle_ms=5")

OCLOC_MISSING = ("ocloc is not installed: as root, `make test` installs it (Debian's intel-opencl-icd, "
                 ".ci/install-ocloc.sh); otherwise run `sudo bash .ci/install-ocloc.sh`")


def browser_missing() -> str | None:
    """Why the browser tests cannot run here (None when Debian's chromium, its driver and selenium are there)."""
    absent = [tool for tool in ("chromium", "chromedriver") if shutil.which(tool) is None]
    if absent:
        return (f"{' and '.join(absent)} not installed: as root, `make test` installs Debian's chromium and "
                "chromium-driver (.ci/install-chromium.sh); otherwise run `sudo bash .ci/install-chromium.sh`")
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed: pip install -e '.[test]'"
    return None


# Files whose tests take minutes in all: collected first, so that under `make test` (pytest-xdist, one file per
# process at a time) they start early instead of leaving one process working alone at the end.  Order only.
LONG_FILES = ("test_tune_workers.py", "test_tune.py", "test_portable_staged.py", "test_reliability.py",
              "test_layouts.py", "test_quant_kernels.py", "test_pipeline.py", "test_registers.py",
              "test_epilogue_traced_device.py", "test_native.py", "test_native_emulation.py")


def pytest_collection_modifyitems(config, items):
    first = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))      # stable: a file keeps its order
    missing = {"ocloc": None if find_ocloc() is not None else OCLOC_MISSING, "browser": browser_missing()}
    for item in items:
        for marker, reason in missing.items():
            if reason and marker in item.keywords:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def sycl_device():
    return select_sycl_device()


@pytest.fixture(scope="session")
def device_info(sycl_device):
    return describe(sycl_device)


TINY_TUNE_CONFIG = """\
name: tiny
problem: {m: 64, n: 64, k: 64}
types: {a: bf16, b: bf16, acc: f32, c: f32}
tile: {workgroup: [32, 32, 32], subgroups: [1, 2], subgroup_size: 16}
profile: {warmup: 1, repeats: 3}
sweep:
  tile: [{workgroup: [32, 32, 32], subgroups: [1, 2]}, {workgroup: [32, 64, 32], subgroups: [2, 2]},
         {workgroup: [16, 32, 16], subgroups: [1, 2]}, {workgroup: [512, 512, 32], subgroups: [1, 1]}]
  pipeline.prefetch: [0, 1, 2]
constraints: ["tile.workgroup[0] % (tile.subgroups[0] * 8) == 0"]
"""
TINY_LEGAL, TINY_PRUNED = 9, 3     # the 512x512 tile needs more registers than a thread has


@pytest.fixture
def tiny_tune_config(tmp_path):
    """A 12-point tuning space at 64^3 (3 points pruned by the planner): each build takes about a second."""
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY_TUNE_CONFIG)
    return path


def run_portable(session, p, staged: bool):
    """C of plan ``p`` (bytes) in the portable lowering on the device, verified: the staged k-step built as
    production builds it, or the atom-by-atom one without optimisation (the most literal reading of the atoms)."""
    import numpy as np

    from xegemm.evaluate import Evaluation, plan_variants
    from xegemm.evaluate.device import DeviceBuilder, VerifyObserver
    from xegemm.lowering import Lowering
    from xegemm.kernel.render import render_kernel
    from xegemm.runtime.program import from_device

    low = Lowering("portable")
    pv = next(pv for pv in plan_variants(p.config) if pv.plan is not None)
    evaluation = Evaluation(pv.name, "ok", "", {})
    builder = DeviceBuilder(session, low, options=None if staged else "-cl-std=CL3.0 -cl-opt-disable")
    kernel = builder.build(pv, render_kernel(p, low, staged=staged), evaluation)
    assert kernel is not None, evaluation.reason
    VerifyObserver().built(pv, evaluation, kernel)
    assert evaluation.status == "ok", (staged, evaluation.reason)
    return from_device(kernel.buffers["c"], np.uint8, kernel.buffers["poison"].shape)


def one_variant(text: str):
    """The one planned variant of a config given as YAML text (its plan asserted)."""
    from xegemm.config import config_from_text
    from xegemm.evaluate import plan_variants

    (pv,) = plan_variants(config_from_text(text))
    assert pv.plan is not None, pv.reason
    return pv


def break_kernel(monkeypatch, old: str, new: str) -> None:
    """Make every rendered kernel replace ``old`` by ``new`` (a generator bug, for mutation tests); the text
    must be there, so a mutant that no longer applies fails instead of testing an honest kernel."""
    from xegemm import evaluate

    original = evaluate.render_variant

    def broken(pv, lowering):
        source = original(pv, lowering)
        assert old in source, f"the mutant's text {old!r} is not in the kernel"
        return source.replace(old, new)

    monkeypatch.setattr(evaluate, "render_variant", broken)


def assert_verifies(pv, session) -> None:
    """Run a planned variant on the session's device: it must verify, every element within its bound."""
    from xegemm.jobs.pipeline import run_variant

    res = run_variant(pv, session)
    assert res.status == "ok", res.reason
    assert res.bad_elements == 0


def assert_fails_verification(monkeypatch, mutation: tuple[str, str], pv, session) -> None:
    """The variant's kernels with ``mutation`` (old, new text; :func:`break_kernel`) must fail verification."""
    from xegemm.jobs.pipeline import run_variant

    break_kernel(monkeypatch, *mutation)
    res = run_variant(pv, session)
    assert res.status == "failed_verify", f"{mutation}: {res.status} {res.reason}"


@pytest.fixture(scope="module")
def session(sycl_device):
    """A device session (queue, inputs and references) shared by a module's tests."""
    from xegemm.jobs.pipeline import DeviceSession

    return DeviceSession(sycl_device)


@pytest.fixture
def code_allowed(monkeypatch):
    """The user's consent to import the Python functions a config names (tests/epilogue_examples.py, on the Python
    path), as XEGEMM_ALLOW_CODE=1 gives it for a run; the refusal without it is tests/test_hostile_surfaces.py's.
    Test files whose configs name functions use it for every test (pytestmark)."""
    monkeypatch.setenv("XEGEMM_ALLOW_CODE", "1")


@pytest.fixture
def no_overrides(monkeypatch):
    """No environment variable chooses the offline compiler or its capabilities: the tests of that choice start
    from the defaults (XEGEMM_OCLOC, XEGEMM_COMPILER, XEGEMM_COMPILER_CAPABILITIES unset)."""
    for name in ("XEGEMM_OCLOC", "XEGEMM_COMPILER", "XEGEMM_COMPILER_CAPABILITIES"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def queue(sycl_device):
    """An in-order queue on the default device, without event profiling (the atom tests time nothing)."""
    from xegemm.runtime.program import make_queue

    return make_queue(sycl_device, profiling=False)


POSTGRES_MISSING = ("PostgreSQL's initdb/pg_ctl are not installed: as root, `make test` installs them "
                    "(.ci/install-postgresql.sh: Debian's postgresql); otherwise run "
                    "`sudo bash .ci/install-postgresql.sh`")
SECRET = "not-a-real-secret"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg_binary(name: str) -> str | None:
    return shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))), None)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


class PostgreSQLServer:
    """A PostgreSQL server of its own in a temporary directory, which a test may stop and start again."""

    def __init__(self, pg_ctl: str, data: str, root: str, port: int, as_user: list[str]):
        self.pg_ctl, self.data, self.root, self.port, self.as_user = pg_ctl, data, root, port, as_user
        # the README's form: postgresql:// is psycopg 3 under SQLAlchemy 2.1
        self.url = f"postgresql://xegemm:{SECRET}@127.0.0.1:{port}/postgres"

    def start(self) -> None:
        subprocess.run([*self.as_user, self.pg_ctl, "-D", self.data, "-l", f"{self.root}/server.log", "-w", "-o",
                        f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1", "start"],
                       check=True, capture_output=True)

    def stop(self, mode: str = "fast") -> None:
        subprocess.run([*self.as_user, self.pg_ctl, "-D", self.data, "-m", mode, "-w", "stop"], capture_output=True)


@pytest.fixture(scope="session")
def postgresql_server():
    """A real PostgreSQL server (initdb refuses root: as root it runs as the `postgres` user, or `nobody`)."""
    initdb, pg_ctl = _pg_binary("initdb"), _pg_binary("pg_ctl")
    if not (initdb and pg_ctl):
        pytest.skip(POSTGRES_MISSING)
    root = tempfile.mkdtemp(prefix="xegemm-pg-")
    as_user = []
    if os.geteuid() == 0:
        user = next((u for u in ("postgres", "nobody") if _has_user(u)), None)
        if user is None or not shutil.which("runuser"):
            pytest.skip("running as root with neither a `postgres` nor a `nobody` user (initdb refuses root)")
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)
        as_user = ["runuser", "-u", user, "--"]
    data = f"{root}/data"
    subprocess.run([*as_user, initdb, "-D", data, "-A", "trust", "-U", "xegemm", "--no-sync", "-E", "UTF8"],
                   check=True, capture_output=True)
    server = PostgreSQLServer(pg_ctl, data, root, _free_port(), as_user)
    server.start()
    try:
        yield server
    finally:
        server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgresql_url(postgresql_server):
    return postgresql_server.url
