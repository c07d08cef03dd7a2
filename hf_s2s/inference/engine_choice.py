"""``--engine auto``: the fastest engine of :data:`hf_s2s.inference.engines.ENGINES` that decodes a folder exactly as
asked, and why it was picked.

The engines are tried fastest first (:data:`FASTEST_FIRST`, an order measured on this project's machines:
docs/inference.md#choosing-the-engine-automatically), and the first one that

- is installed (CTranslate2, ONNX: their extras),
- runs the folder's family and weight type (CTranslate2 has no RNN models; bfloat16 is torch's alone), and reads the
  folder as it is (a folder ``hf-s2s export-onnx`` wrote holds no torch weights),
- decodes every option asked for, from the call or the folder's generation config, as ``generate()`` decodes it
  (:meth:`~hf_s2s.inference.engines.Engine.options` refuses what an engine does not implement; in exact mode,
  CTranslate2 also refuses the beam search it stops otherwise than ``generate()``'s default),
- and gives what else the caller needs (an alignment, an ensemble: ``needs``)

is opened (no weights loaded yet) in exact mode, so later calls (a server's requests) are held to the same rule.
torch, last, decodes everything ``generate()`` does: what it refuses is the call's own error.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .decoding import DecodingOptions
from .engines import ENGINES, Engine, weight_type

AUTO = "auto"  # --engine auto
# The engines --engine auto tries for each weight type, fastest first: CTranslate2 against generate() in
# docs/benchmarks.md#decoding-speed, ONNX against generate() in docs/inference.md#export-to-onnx. torch last: it
# decodes everything.
FASTEST_FIRST = {"float32": ("ctranslate2", "onnx", "torch"), "int8": ("ctranslate2", "torch"), "bfloat16": ("torch",)}


@dataclass
class EngineChoice:
    """The engine ``--engine auto`` opened, the call's options completed by it, and why it was chosen."""

    engine: Engine
    options: DecodingOptions
    reason: str  # one line: the engine, and why each faster one was passed over


def first_clause(error: Exception) -> str:
    """An engine's refusal, shortened to what it refuses (the text before its advice)."""
    return str(error).split("; ")[0].split(": use ")[0].rstrip(".")


def open_fastest_engine(folders: str | Path | Sequence[str | Path], *, dtype: str = "float32", int8: bool = False,
                        threads: int | None = None, call: dict | None = None,
                        needs: Callable[[Engine], None] | None = None) -> EngineChoice:
    """The first engine of ``FASTEST_FIRST`` that decodes ``folders`` with ``call`` (:meth:`Engine.options`'s
    keywords) exactly as ``generate()`` would (see the module docstring), opened in exact mode, with ``call``'s options.
    ``needs(engine)`` raises a ValueError where an engine lacks what the caller needs beyond decoding (an alignment).
    The torch engine's own refusal is raised as it is: no engine decodes such a call."""
    weights = weight_type(dtype, int8)
    passed = []
    names = FASTEST_FIRST[weights]
    for name in names:
        try:
            engine = ENGINES[name](folders, weights=weights, threads=threads)
            engine.exact = True
            options = engine.options(**(call or {}))
            if needs is not None:
                needs(engine)
        except (ImportError, OSError, ValueError) as error:
            if name == names[-1]:
                raise
            passed.append(f"{name}: {first_clause(error)}")
            continue
        order = " > ".join(names)
        why = f"the fastest engine ({order}) that decodes it as asked"
        if passed:
            why += "; passed over " + "; ".join(passed)
        engine.choice = f"--engine auto chose {name} ({weights}): {why}"
        return EngineChoice(engine, options, engine.choice)
    raise AssertionError("unreachable: the last engine raises")


__all__ = ["AUTO", "FASTEST_FIRST", "EngineChoice", "open_fastest_engine"]
