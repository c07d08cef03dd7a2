"""BLEU (cased and lowercased) and chrF from sacreBLEU as an ``evaluate`` metric that loads offline by path.

``evaluate.load("sacrebleu")`` fetches its script from the Hub; this module ships inside hf_s2s and loads with
``evaluate.load(hf_s2s.metrics.TRANSLATION_METRIC_PATH)``. It imports nothing from hf_s2s: ``evaluate`` copies
the file on its own into its module cache.

Scores are sacreBLEU's corpus scores on detokenized text (BLEU: tokenize 13a by default, smoothing "exp";
chrF: character 6-grams, beta 2, word_order 0), each with its signature string so results are reproducible.
"""

import datasets
import evaluate
from sacrebleu.metrics import BLEU, CHRF

_CITATION = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    pages = "186--191",
}
@inproceedings{popovic-2015-chrf,
    title = "chr{F}: character n-gram {F}-score for automatic {MT} evaluation",
    author = "Popovi{\\'c}, Maja",
    booktitle = "Proceedings of the Tenth Workshop on Statistical Machine Translation",
    year = "2015",
    pages = "392--395",
}
"""

_DESCRIPTION = "Corpus BLEU (cased and lowercased) and chrF computed by sacreBLEU, with their signatures."

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of detokenized hypotheses, one string per segment.
    references: one reference string per segment, or a list of reference strings per segment (the same
        number for every segment).
    tokenize: BLEU tokenizer, "13a" (default), "intl", "none", ...
    chrf_word_order: 0 for chrF (default), 2 for chrF++.
Returns:
    bleu, bleu_lowercase, chrf: scores in [0, 100];
    bleu_precisions, bleu_bp, bleu_sys_len, bleu_ref_len: details of the cased BLEU;
    bleu_signature, bleu_lowercase_signature, chrf_signature: sacreBLEU signature strings.
"""


def _reference_streams(references: list) -> list[list[str]]:
    """sacreBLEU wants one stream per reference position: transpose per-segment reference lists."""
    per_segment = [[ref] if isinstance(ref, str) else list(ref) for ref in references]
    counts = {len(refs) for refs in per_segment}
    if len(counts) > 1:
        raise ValueError(f"every segment needs the same number of references, got counts {sorted(counts)}")
    return [list(stream) for stream in zip(*per_segment, strict=True)]


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SacrebleuTranslation(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=[
                datasets.Features(
                    {"predictions": datasets.Value("string"), "references": datasets.Sequence(datasets.Value("string"))}
                ),
                datasets.Features({"predictions": datasets.Value("string"), "references": datasets.Value("string")}),
            ],
            homepage="https://github.com/mjpost/sacrebleu",
            codebase_urls=["https://github.com/mjpost/sacrebleu"],
        )

    def _compute(self, predictions, references, tokenize="13a", chrf_word_order=0):
        if len(predictions) != len(references):
            raise ValueError(f"{len(predictions)} predictions but {len(references)} references")
        streams = _reference_streams(references)
        bleu = BLEU(tokenize=tokenize)
        bleu_lower = BLEU(tokenize=tokenize, lowercase=True)
        chrf = CHRF(word_order=chrf_word_order)
        bleu_score = bleu.corpus_score(predictions, streams)
        bleu_lower_score = bleu_lower.corpus_score(predictions, streams)
        chrf_score = chrf.corpus_score(predictions, streams)
        return {
            "bleu": bleu_score.score,
            "bleu_lowercase": bleu_lower_score.score,
            "chrf": chrf_score.score,
            "bleu_precisions": bleu_score.precisions,
            "bleu_bp": bleu_score.bp,
            "bleu_sys_len": bleu_score.sys_len,
            "bleu_ref_len": bleu_score.ref_len,
            "bleu_signature": str(bleu.get_signature()),
            "bleu_lowercase_signature": str(bleu_lower.get_signature()),
            "chrf_signature": str(chrf.get_signature()),
        }
