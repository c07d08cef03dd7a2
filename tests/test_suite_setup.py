"""The suite's own settings, as a user's pytest reads them: pytest-xdist's defaults (one worker per test file,
at most 8 workers) where the test extra is installed, and a pytest without pytest-xdist that still runs."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THIS_FILE = str(Path(__file__).relative_to(ROOT))


def run_pytest(*args: str, plugin_dir: Path | None = None) -> subprocess.CompletedProcess:
    env = None
    if plugin_dir is not None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(plugin_dir), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           THIS_FILE, *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)


def test_pytest_without_xdist_runs_the_suite():  # one pytest process, collecting one file
    """pyproject names no pytest-xdist option: without the plugin, pytest collects instead of stopping at
    "unrecognized arguments" (exit 4)."""
    result = run_pytest("-p", "no:xdist")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "test_pytest_without_xdist_runs_the_suite" in result.stdout


@pytest.mark.slow  # a pytest process per case, with its workers
@pytest.mark.parametrize("args, expected", [
    (["-n", "2"], "dist=loadfile maxprocesses=8 workers=2"),
    (["-n", "2", "--dist", "load"], "dist=load maxprocesses=8 workers=2"),
    (["-n", "3", "--maxprocesses", "1"], "dist=loadfile maxprocesses=1 workers=1"),
    ([], "dist=no maxprocesses=None workers=0"),
])
def test_xdist_defaults_apply_only_where_the_user_gave_none(tmp_path, args, expected):
    (tmp_path / "xdist_probe.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.hookimpl(trylast=True)
        def pytest_configure(config):
            if not hasattr(config, "workerinput"):  # the controller, after pytest-xdist read -n
                print("probe: dist={} maxprocesses={} workers={}".format(
                    config.option.dist, config.option.maxprocesses, len(config.option.tx or [])))
    """))
    result = run_pytest("-p", "xdist_probe", "-s", *args, plugin_dir=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"probe: {expected}" in result.stdout + result.stderr
