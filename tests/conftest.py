"""Test setup: never reach the network, and keep the Hugging Face cache (remote code modules included) in a
temporary folder. This runs before any test module imports transformers. Where the checkout has the shared Multi30k
beside it, the tests that read the real corpus find it through $HF_S2S_DATA_DIR, as the checkout's scripts do
(scripts/checkout.py); elsewhere they skip.

A test run leaves the machine's temporary folder as it found it. The session gets a folder of its own, and
$TMPDIR (``tempfile``, for this process and every process it starts) points into it, so that what a test
leaves behind is seen there, not among what other programs write to /tmp at the same time. pytest's
``tmp_path`` folders are made there too (``pytest-of-<user>``, pytest's to manage). A run that leaves anything
else fails, naming each entry and the test after which it appeared; a run that passes removes the session's
folder, a failed one keeps it for inspection and says where."""

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:  # one of pytest-xdist's workers (pytest -n N): share the cores out
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

SESSION_DIR = Path(tempfile.mkdtemp(prefix="hf_s2s_tests_"))  # in the machine's temporary folder
SESSION_TMPDIR = SESSION_DIR / "tmp"  # what tempfile gives this run: what stays here but pytest's fails it
SESSION_TMPDIR.mkdir()
os.environ["TMPDIR"] = str(SESSION_TMPDIR)
tempfile.tempdir = str(SESSION_TMPDIR)  # tempfile has already cached /tmp (pytest's capture asked first)
os.environ["HF_HOME"] = str(SESSION_DIR / "hf_home")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from checkout import use_shared_corpus  # noqa: E402  (scripts/checkout.py)

use_shared_corpus([])

# What may stay in the session's $TMPDIR (a name's start -> whose it is); the session's folder goes with it.
NOT_LEFT_BY_TESTS = {
    "pytest-of-": "pytest's tmp_path and tmp_path_factory folders",
    "torchinductor_": "torch's cache for torch.compile kernels, which torch creates under $TMPDIR by design",
    ".ses": "onnxruntime's telemetry session file (first launch time and an id), which import onnxruntime "
            "writes",
    "hf_s2s_tests_": "the session folders of pytest-xdist's workers (pytest -n N), each checked by its own worker",
}
# entry of SESSION_TMPDIR -> the test after which it was first seen
first_seen: dict[str, str] = {}
FAILED = pytest.StashKey[bool]()  # whether the test session failed: its folder is then kept


def left_in_tmpdir() -> set[str]:
    """The entries of the session's $TMPDIR that no test should leave (all but :data:`NOT_LEFT_BY_TESTS`)."""
    return {path.name for path in SESSION_TMPDIR.iterdir()
            if not path.name.startswith(tuple(NOT_LEFT_BY_TESTS))}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which turns -n N into N workers
def pytest_cmdline_main(config):
    """With pytest-xdist's workers (``-n auto``, as the README's command runs): a test file stays on one worker
    (``--dist loadfile``, unless another mode is asked for), so its module-scoped fixtures (trained tiny models,
    servers, a browser) are built once; and at most 8 workers (each takes about 1-2 GB) unless ``--maxprocesses``
    says otherwise. Set here rather than in pyproject's addopts, which would make pytest without pytest-xdist
    stop at "unrecognized arguments"."""
    if not config.pluginmanager.hasplugin("xdist") or not getattr(config.option, "numprocesses", None):
        return
    if config.option.dist == "no":
        config.option.dist = "loadfile"
    if config.option.maxprocesses is None:
        config.option.maxprocesses = 8


def pytest_runtest_logfinish(nodeid, location):
    present = left_in_tmpdir()
    for name in present - first_seen.keys():
        first_seen[name] = nodeid
    for name in first_seen.keys() - present:  # removed later, by the test or a fixture's teardown
        del first_seen[name]


def pytest_sessionfinish(session, exitstatus):
    left = sorted(left_in_tmpdir())
    if left:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep("=", "files left in the temporary folder", red=True)
        for name in left:
            by = first_seen.get(name, "the session (its setup or teardown)")
            report(session.config, f"{SESSION_TMPDIR / name}: left by {by}")
    session.config.stash[FAILED] = session.exitstatus != pytest.ExitCode.OK


def pytest_unconfigure(config):
    """Remove the session's folder, unless a test session failed (then say where it is kept). A pytest that
    runs no session (--help, --version; the docs test runs one) removes it too."""
    if config.stash.get(FAILED, False):
        report(config, f"this run's temporary files are kept in {SESSION_DIR}")
    else:
        shutil.rmtree(SESSION_DIR, ignore_errors=True)


def report(config, line: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)
    else:
        print(line, file=sys.stderr)
