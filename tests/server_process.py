"""`hf-s2s serve` in a process of its own, for the tests of the server (SIGTERM) and of the installed wheel."""

import sys
from pathlib import Path

from hf_s2s.benchmark.serving_memory import start_serve
from tests.helpers import default_ctrl_c


def start_server_process(arguments: list[str], cwd: Path, executable: list[str] | None = None, env=None,
                         timeout: float = 180):
    """`hf-s2s serve ARGUMENTS --port 0` in a process of its own (``executable``: the command to run, default this
    interpreter's ``-m hf_s2s.cli``); returns (process, base URL) once it answers /health."""
    command = (executable or [sys.executable, "-m", "hf_s2s.cli"]) + ["serve", *arguments, "--port", "0",
                                                                     "--log-level", "warning"]
    # default_ctrl_c: the SIGINT tests stop it as Ctrl-C would
    return start_serve(command, cwd=cwd, env=env, preexec_fn=default_ctrl_c, timeout=timeout)
