"""The shipped evaluate metric module gives sacreBLEU's own numbers, offline."""

import numpy as np
import pytest
import sacrebleu
from transformers import EvalPrediction

from hf_s2s.data.synthetic import text_reversal_corpus
from hf_s2s.data.tokenization import train_tokenizer
from hf_s2s.metrics import (
    TRANSLATION_METRIC_PATH,
    build_compute_metrics,
    compute_translation_metrics,
    load_translation_metric,
)

HYPOTHESES = [
    "A man in an orange hat is looking at something.",
    "a boston terrier runs on lush green grass in front of a white fence.",
    "A girl in a karate uniform breaks a stick with a kick.",
    "Five people in winter jackets and helmets stand in the snow.",
]
REFERENCES = [
    "A man in an orange hat starring at something.",
    "A Boston Terrier is running on lush green grass in front of a white fence.",
    "A girl in karate uniform breaking a stick with a front kick.",
    "Five people wearing winter jackets and helmets stand in the snow, with snowmobiles in the background.",
]
SECOND_REFERENCES = [
    "A man wearing an orange hat stares at something.",
    "A dog runs on the grass in front of a white fence.",
    "A girl in a karate outfit breaks a stick with a kick.",
    "Five people in winter jackets stand in the snow.",
]


def test_loads_offline_by_path():
    assert TRANSLATION_METRIC_PATH.endswith("sacrebleu_translation.py")
    metric = load_translation_metric()
    assert metric.name == "sacrebleu_translation"


def test_equals_sacrebleu_single_reference():
    scores = compute_translation_metrics(HYPOTHESES, REFERENCES)
    bleu = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES])
    bleu_lower = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES], lowercase=True)
    chrf = sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES])
    assert scores["bleu"] == bleu.score and scores["bleu_lowercase"] == bleu_lower.score
    assert scores["chrf"] == chrf.score
    assert scores["bleu_lowercase"] > scores["bleu"] > 0  # "boston terrier" only matches lowercased
    assert scores["bleu_precisions"] == bleu.precisions and scores["bleu_bp"] == bleu.bp
    assert (scores["bleu_sys_len"], scores["bleu_ref_len"]) == (bleu.sys_len, bleu.ref_len)
    version = sacrebleu.__version__
    assert scores["bleu_signature"] == f"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{version}"
    assert scores["bleu_lowercase_signature"] == f"nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:{version}"
    assert scores["chrf_signature"] == f"nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:{version}"


def test_equals_sacrebleu_multiple_references_and_options():
    per_segment = [list(refs) for refs in zip(REFERENCES, SECOND_REFERENCES, strict=True)]
    scores = compute_translation_metrics(HYPOTHESES, per_segment, tokenize="intl", chrf_word_order=2)
    streams = [REFERENCES, SECOND_REFERENCES]
    assert scores["bleu"] == sacrebleu.corpus_bleu(HYPOTHESES, streams, tokenize="intl").score
    assert scores["bleu_lowercase"] == sacrebleu.corpus_bleu(HYPOTHESES, streams, tokenize="intl", lowercase=True).score
    assert scores["chrf"] == sacrebleu.corpus_chrf(HYPOTHESES, streams, word_order=2).score
    assert scores["bleu_signature"].startswith("nrefs:2|case:mixed|eff:no|tok:intl|")
    assert scores["bleu"] > compute_translation_metrics(HYPOTHESES, REFERENCES, tokenize="intl")["bleu"]


def test_perfect_and_bad_input():
    assert round(compute_translation_metrics(REFERENCES, REFERENCES)["bleu"], 6) == 100.0
    with pytest.raises(ValueError, match=r"same number of references, got counts \[1, 2\]"):
        compute_translation_metrics(HYPOTHESES[:2], [["a"], ["b", "c"]])
    with pytest.raises(ValueError):
        compute_translation_metrics(HYPOTHESES, REFERENCES[:2])


def test_build_compute_metrics_decodes_ids():
    corpus = text_reversal_corpus(100, 1, 1)
    tokenizer = train_tokenizer(corpus, "src", "tgt", vocab_size=300)
    hypotheses, references = ["a b c", "d e f g"], ["a b c", "d e f h"]
    predictions = tokenizer(hypotheses, padding=True, return_tensors="np")["input_ids"]
    labels = tokenizer(text_target=references, padding=True, return_tensors="np")["input_ids"]
    labels = np.where(labels == tokenizer.pad_token_id, -100, labels)
    predictions = np.concatenate([np.full((2, 1), tokenizer.bos_token_id), predictions], axis=1)  # decoder start
    scores = build_compute_metrics(tokenizer)(EvalPrediction(predictions=predictions, label_ids=labels))
    assert scores["bleu"] == sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert "bleu_signature" not in scores and set(scores) >= {"bleu", "bleu_lowercase", "chrf"}
