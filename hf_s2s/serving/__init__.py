"""The HTTP translation service behind ``hf-s2s serve``: FastAPI on uvicorn, with dynamic batching.

- :mod:`.config`: the settings (batching, request limits) and their defaults;
- :mod:`.batching`: concurrent requests gathered into length-sorted batches (no FastAPI in it);
- :mod:`.metrics`: the Prometheus metrics;
- :mod:`.schemas`: the request and response bodies (pydantic), which the OpenAPI page at ``/docs`` shows;
- :mod:`.app`: the FastAPI application (``POST /translate``, ``GET /health``, ``GET /models``, ``GET /metrics``);
- :mod:`.server`: uvicorn around it, on the command line's port or in a thread (tests, benchmarks).

The engines that decode live a floor below, in :mod:`hf_s2s.inference.engines`. FastAPI, uvicorn and
prometheus-client are the optional extra ``serve`` (``pip install 'hf_s2s[serve]'``): this module imports none of
them, so that ``hf-s2s serve --help`` works without it and :func:`require_serve_extra` can say what is missing.
"""

from importlib.util import find_spec

SERVE_PACKAGES = ("fastapi", "uvicorn", "prometheus_client")


def require_serve_extra() -> None:
    """An ImportError naming the missing packages and the extra to install, where the serve extra is missing."""
    missing = [name for name in SERVE_PACKAGES if find_spec(name) is None]
    if missing:
        raise ImportError(f"serving needs {', '.join(missing)}: pip install 'hf_s2s[serve]'")


__all__ = ["SERVE_PACKAGES", "require_serve_extra"]
