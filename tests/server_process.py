"""`hf-s2s serve` in a process of its own, for the tests of the server (SIGTERM) and of the installed wheel."""

import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.helpers import default_ctrl_c


def start_server_process(arguments: list[str], cwd: Path, executable: list[str] | None = None, env=None,
                         timeout: float = 180):
    """`hf-s2s serve ARGUMENTS --port 0` in a process of its own (``executable``: the command to run, default this
    interpreter's ``-m hf_s2s.cli``); returns (process, base URL) once it answers /health."""
    command = (executable or [sys.executable, "-m", "hf_s2s.cli"]) + ["serve", *arguments, "--port", "0",
                                                                     "--log-level", "warning"]
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=default_ctrl_c)  # the SIGINT tests stop it as Ctrl-C would
    line = process.stdout.readline()  # "listening on http://127.0.0.1:PORT (OpenAPI: ...)"
    if not line.startswith("listening on "):
        process.kill()
        raise AssertionError(f"the server did not start: {line}{process.stderr.read()[-3000:]}")
    url = line.split()[2]
    deadline = time.monotonic() + timeout
    while True:
        try:
            httpx.get(f"{url}/health").raise_for_status()
            return process, url
        except httpx.TransportError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise AssertionError(f"the server does not answer: {process.stderr.read()[-3000:]}") from None
            time.sleep(0.1)
