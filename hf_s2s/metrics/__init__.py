"""Translation metrics through ``evaluate``, offline: a metric module shipped in this folder, loaded by path.

>>> from hf_s2s.metrics import compute_translation_metrics
>>> round(compute_translation_metrics(["A dog runs."], ["A dog runs."])["bleu"], 2)
100.0
"""

from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

# The evaluate module: sacreBLEU BLEU (cased + lowercased) and chrF with signatures.
TRANSLATION_METRIC_PATH = str(Path(__file__).with_name("sacrebleu_translation.py"))


def load_translation_metric(**kwargs: Any):
    """``evaluate.load`` of the shipped metric module (works offline); ``kwargs`` go to ``evaluate.load``.

    Kept in memory by default: no cache files, so several processes (DDP) can compute at once without
    fighting over evaluate's lock files."""
    import evaluate

    kwargs.setdefault("keep_in_memory", True)
    return evaluate.load(TRANSLATION_METRIC_PATH, **kwargs)


@lru_cache(maxsize=1)
def _shared_metric():
    return load_translation_metric()


def compute_translation_metrics(
    predictions: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]], **kwargs: Any
) -> dict[str, Any]:
    """BLEU, lowercased BLEU, chrF and their signatures for detokenized ``predictions`` against
    ``references`` (one string, or a list of strings, per segment); ``kwargs``: ``tokenize``,
    ``chrf_word_order``."""
    return _shared_metric().compute(
        predictions=list(predictions), references=list(references), **kwargs
    )


def build_compute_metrics(tokenizer: Any, **kwargs: Any) -> Callable[[Any], dict[str, float]]:
    """A ``compute_metrics`` for ``Seq2SeqTrainer(predict_with_generate=True)``: decodes generated ids and
    labels (-100 -> pad) with ``tokenizer`` (the target-side one) and returns the numeric scores.

    References decoded from labels are normalized by the tokenizer; report final scores against the raw
    reference text with :func:`compute_translation_metrics`.
    """
    metric = _shared_metric()

    def compute_metrics(eval_prediction: Any) -> dict[str, float]:
        predictions, labels = eval_prediction.predictions, eval_prediction.label_ids
        if isinstance(predictions, tuple):
            predictions = predictions[0]
        predictions = np.where(predictions < 0, tokenizer.pad_token_id, predictions)
        labels = np.where(labels < 0, tokenizer.pad_token_id, labels)
        hypotheses = tokenizer.batch_decode(predictions, skip_special_tokens=True)
        references = tokenizer.batch_decode(labels, skip_special_tokens=True)
        scores = metric.compute(predictions=hypotheses, references=references, **kwargs)
        return {key: value for key, value in scores.items() if isinstance(value, int | float)}

    return compute_metrics


__all__ = ["TRANSLATION_METRIC_PATH", "build_compute_metrics", "compute_translation_metrics", "load_translation_metric"]
