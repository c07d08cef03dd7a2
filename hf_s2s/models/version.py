"""The hf_s2s release, in one place: pyproject.toml reads it for the wheel, ``hf_s2s.__version__`` re-exports it, and
the configurations record it in every saved config.json (``hf_s2s_version``, beside transformers' own
``transformers_version``). Copied into saved model folders beside the configuration files."""

__version__ = "0.3.0"
