"""The HTTP translation service behind ``hf-s2s serve``: FastAPI on uvicorn, with dynamic batching.

- :mod:`.config`: the settings (batching, request limits) and their defaults;
- :mod:`.folders`: what the command checks of a model folder before loading it;
- :mod:`.batching`: concurrent requests gathered into length-sorted batches (no FastAPI in it);
- :mod:`.metrics`: the Prometheus metrics;
- :mod:`.schemas`: the request and response bodies (pydantic), which the OpenAPI page at ``/docs`` shows;
- :mod:`.app`: the FastAPI application (``POST /translate``, ``GET /health``, ``GET /models``, ``GET /metrics``,
  and the attention explorer's page at ``/``, whose HTML, CSS and JavaScript are the package data in ``static/``);
- :mod:`.server`: uvicorn around it, on the command line's port or in a thread (tests, benchmarks).

The engines that decode live a floor below, in :mod:`hf_s2s.inference.engines`. FastAPI, uvicorn and
prometheus-client are the optional extra ``serve`` (``pip install 'hf_s2s[serve]'``): this module imports none of
them, so that ``hf-s2s serve --help`` works without it and :func:`require_serve_extra` can say what is missing.
"""

from importlib.util import find_spec

SERVE_PACKAGES = ("fastapi", "uvicorn", "prometheus_client")


def require_serve_extra(also: tuple[str, ...] = ()) -> None:
    """An ImportError naming the missing packages and what to install, where the serve extra (or a package of
    ``also``, such as the benchmark's HTTP client httpx) is missing."""
    missing = [name for name in (*SERVE_PACKAGES, *also) if find_spec(name) is None]
    if missing:
        others = "".join(f" {name}" for name in also if name in missing)
        raise ImportError(f"serving needs {', '.join(missing)}: pip install 'hf_s2s[serve]'{others}")


__all__ = ["SERVE_PACKAGES", "require_serve_extra"]
