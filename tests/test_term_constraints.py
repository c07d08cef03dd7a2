"""Terminology constraints in ``generate()`` (hf_s2s/models/term_constraints.py), both families, greedy and beam: every
target term of a sentence appears in its translation; a sentence without terms decodes exactly as without
constraints, alone and beside sentences with terms; bad terms are refused by name."""

import pytest
import torch

from tests.helpers import FAMILIES
from tests.helpers import LEXICAL_PAD as PAD
from tests.helpers import LEXICAL_VOCAB as VOCAB
from tests.helpers import lexical_tiny_model as model_of


def source_batch():
    torch.manual_seed(0)
    input_ids = torch.randint(3, VOCAB, (3, 8))
    input_ids[1, 5:] = PAD
    return {"input_ids": input_ids, "attention_mask": (input_ids != PAD).long()}


def generate(model, **kwargs):
    with torch.no_grad():
        return model.generate(**source_batch(), max_new_tokens=14, **kwargs)


def holds(row: list[int], term: list[int]) -> bool:
    return any(row[i : i + len(term)] == term for i in range(len(row) - len(term) + 1))


@pytest.mark.parametrize("num_beams", [1, 4])
@pytest.mark.parametrize("model_type", FAMILIES)
def test_every_term_appears_and_a_sentence_without_terms_decodes_as_without_constraints(model_type, num_beams):
    model = model_of(model_type)
    free = generate(model, num_beams=num_beams)
    terms = [[[41, 42, 43], [17]], [], [[9, 8]]]
    for row, sentence_terms in enumerate(terms):  # the terms are not what the model writes anyway
        assert not any(holds(free[row].tolist(), term) for term in sentence_terms)
    constrained = generate(model, num_beams=num_beams, target_terms=terms)
    for row, sentence_terms in enumerate(terms):
        assert all(holds(constrained[row].tolist(), term) for term in sentence_terms), (row, constrained[row])
    width = min(free.shape[1], constrained.shape[1])
    assert constrained[1, :width].tolist() == free[1, :width].tolist()  # no terms: untouched
    no_terms = generate(model, num_beams=num_beams, target_terms=[[], [], []])
    assert torch.equal(no_terms, free)


def test_bad_terms_are_refused_by_name():
    model = model_of("transformer_seq2seq")
    with pytest.raises(ValueError, match="one list of terms per sentence of the batch"):
        generate(model, target_terms=[[[5]]])
    with pytest.raises(ValueError, match=r"target token ids in \[0, 50\)"):
        generate(model, target_terms=[[[5, VOCAB]], [], []])
    with pytest.raises(ValueError, match="term_bonus"):
        generate(model, target_terms=[[], [], []], term_bonus=float("nan"))
