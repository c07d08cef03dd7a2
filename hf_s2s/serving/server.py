"""uvicorn around the application: on a port until SIGTERM or Ctrl-C (``hf-s2s serve``), or in a thread for tests
and benchmarks (:func:`serve_in_thread`).

Shutdown is uvicorn's graceful one, with the application told when it begins (:func:`hf_s2s.serving.app.drain`): the
listening socket closes, new requests are answered 503, the waiting ones are decoded for at most ``graceful_timeout``
seconds and those still unanswered then are answered 503. uvicorn waits a little longer than that before it cancels
what is left (a body still being uploaded), which the application answers 503 too."""

import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from .app import drain
from .config import DEFAULT_GRACEFUL_TIMEOUT

# Seconds uvicorn waits past the batchers' deadline (graceful_timeout) for their 503 answers to be sent, before it
# cancels the requests still running.
_ANSWER_MARGIN = 2.0


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host``:``port`` (0: a free port, which ``getsockname()`` tells): bound and
    listening before the application starts, so that a client connecting meanwhile waits instead of being refused.

    Its protocol is named (IPPROTO_TCP, not 0): the connections it accepts inherit it, and asyncio turns Nagle's
    algorithm off (TCP_NODELAY) only on sockets that name TCP. Left on, an answer written in two parts waited for
    the client's delayed acknowledgement: about 40 ms before a client's next request on the same connection."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class _Server(uvicorn.Server):
    """uvicorn's server, draining the application's batchers (:func:`drain`) as its graceful shutdown begins."""

    def __init__(self, config: uvicorn.Config, graceful_timeout: float):
        super().__init__(config)
        self.graceful_timeout = graceful_timeout

    async def shutdown(self, sockets=None) -> None:
        drain(self.config.app, self.graceful_timeout)
        await super().shutdown(sockets=sockets)


def _server(app, log_level: str, graceful_timeout: float, access_log: bool) -> uvicorn.Server:
    config = uvicorn.Config(app, log_level=log_level, access_log=access_log, lifespan="on", loop="asyncio",
                            timeout_graceful_shutdown=graceful_timeout + _ANSWER_MARGIN)
    return _Server(config, graceful_timeout)


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(app, host: str = "127.0.0.1", port: int = 8000, *, log_level: str = "info",
          graceful_timeout: float = DEFAULT_GRACEFUL_TIMEOUT) -> None:
    """Serve ``app`` until SIGTERM or SIGINT, then shut down gracefully (and end with status 130 after SIGINT). The
    address is printed on stdout first (``listening on http://HOST:PORT``; with ``port`` 0 the port chosen)."""
    sock = bind_socket(host, port)
    print(f"listening on {url_of(sock)} (OpenAPI: {url_of(sock)}/docs)", flush=True)
    server = _server(app, log_level, graceful_timeout, access_log=True)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn raises Ctrl-C again once it has shut down: the expected end, no traceback
        sys.exit(130)  # the shell's status for a command stopped by Ctrl-C (128 + SIGINT)
    if not server.started:  # the application failed to start: uvicorn has said why
        sys.exit(3)


@contextmanager
def serve_in_thread(app, host: str = "127.0.0.1", *, log_level: str = "warning",
                    graceful_timeout: float = DEFAULT_GRACEFUL_TIMEOUT, start_timeout: float = 60.0) -> Iterator[str]:
    """Serve ``app`` on a free port of ``host`` in a thread of this process; yields the base URL once the server has
    started, and shuts it down (gracefully) when the block ends."""
    sock = bind_socket(host, 0)
    server = _server(app, log_level, graceful_timeout, access_log=False)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="hf_s2s-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError("the server did not start (see its log)")
        time.sleep(0.01)
    try:
        yield url_of(sock)
    finally:
        server.should_exit = True
        thread.join()
        sock.close()


__all__ = ["bind_socket", "serve", "serve_in_thread", "url_of"]
