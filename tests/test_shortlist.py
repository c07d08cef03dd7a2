"""Vocabulary shortlists in ``generate()`` (hf_s2s/models/shortlist.py): the full vocabulary as shortlist decodes
bit for bit as without one; a shortlist holding the tokens the full decode produced gives the same output (greedy;
beam search where the tokens left out carry no probability mass to speak of, a model whose distributions are
peaked); the output layer multiplies only the K
shortlisted rows; a batch decodes over the union of its sources' shortlists and the special tokens; the file
round-trips; what cannot work is refused. Both families."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import LogitsProcessorList

from hf_s2s.models.shortlist import SHORTLIST_FILE, OutputVocabulary, VocabularyShortlist
from tests.helpers import random_tiny_model

FAMILIES = ("rnn_seq2seq", "transformer_seq2seq")
VOCAB, PAD, START, EOS = 50, 0, 1, 2
SPECIAL = (PAD, START, EOS)


def model_of(model_type, peaked: float = 1.0):
    """A random tiny model; ``peaked`` scales its output layer, so its next-token distributions concentrate."""
    model = random_tiny_model(model_type, VOCAB, seed=3, pad_token_id=PAD, bos_token_id=START,
                              decoder_start_token_id=START, eos_token_id=EOS)
    with torch.no_grad():
        model.lm_head.weight.mul_(peaked)
    return model


def source_batch():
    torch.manual_seed(0)
    input_ids = torch.randint(3, VOCAB, (4, 9))
    input_ids[1, 6:] = PAD
    input_ids[3, 4:] = PAD
    return {"input_ids": input_ids, "attention_mask": (input_ids != PAD).long()}


def generate(model, **kwargs):
    with torch.no_grad():
        return model.generate(**source_batch(), max_new_tokens=12, return_dict_in_generate=True, output_scores=True,
                              **kwargs)


@pytest.mark.parametrize("num_beams", [1, 4])
@pytest.mark.parametrize("model_type", FAMILIES)
def test_the_full_vocabulary_as_shortlist_decodes_bit_for_bit_as_without_one(model_type, num_beams):
    model = model_of(model_type)
    full = generate(model, num_beams=num_beams)
    shortlisted = generate(model, num_beams=num_beams, output_vocabulary=OutputVocabulary(range(VOCAB), VOCAB))
    assert torch.equal(full.sequences, shortlisted.sequences)
    assert all(torch.equal(a, b) for a, b in zip(full.scores, shortlisted.scores, strict=True))
    if num_beams > 1:
        assert torch.equal(full.sequences_scores, shortlisted.sequences_scores)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_greedy_over_a_shortlist_holding_the_full_decodes_tokens_gives_its_output(model_type):
    model = model_of(model_type)
    full = generate(model)
    produced = full.sequences.unique()
    assert len(produced) < VOCAB // 2  # a real reduction: the test would pass trivially otherwise
    shortlisted = generate(model, output_vocabulary=OutputVocabulary(produced, VOCAB))
    assert torch.equal(full.sequences, shortlisted.sequences)


@pytest.mark.parametrize("model_type", FAMILIES)
def test_beam_over_a_shortlist_holding_the_full_decodes_tokens_gives_its_output(model_type):
    """Beam search normalizes over the shortlist (as Marian and CTranslate2 do); where the tokens left out carry no
    probability mass to speak of (a peaked model), it returns what the full vocabulary returns, with its score."""
    model = model_of(model_type, peaked=6.0)
    full = generate(model, num_beams=4)
    produced = full.sequences.unique()
    assert len(produced) < VOCAB // 2
    shortlisted = generate(model, num_beams=4, output_vocabulary=OutputVocabulary(produced, VOCAB))
    assert torch.equal(full.sequences, shortlisted.sequences)
    torch.testing.assert_close(full.sequences_scores, shortlisted.sequences_scores, rtol=0, atol=1e-4)


class MatrixProducts(TorchDispatchMode):
    """The (rows, columns) of the output of every matrix product made while active."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func._schema.name.split("::")[-1] in ("mm", "addmm", "bmm", "matmul", "linear"):
            self.shapes.append(tuple(result.shape))
        return result


@pytest.mark.parametrize("model_type", FAMILIES)
def test_the_output_layer_multiplies_only_the_shortlisted_rows(model_type):
    model = model_of(model_type)
    kept = OutputVocabulary([*SPECIAL, 7, 11, 19, 23, 31], VOCAB)
    for vocabulary, width in ((None, VOCAB), (kept, len(kept))):
        with MatrixProducts() as products, torch.no_grad():
            model.generate(**source_batch(), max_new_tokens=5, min_new_tokens=5,
                           **({} if vocabulary is None else {"output_vocabulary": vocabulary}))
        widths = [shape[-1] for shape in products.shapes]
        assert widths.count(width) == 5  # one output-layer product per step, `width` columns wide
        assert VOCAB not in widths or vocabulary is None


def test_a_batch_decodes_over_the_union_of_its_sources_candidates_the_tokens_kept_always_and_the_specials():
    candidates = [[] for _ in range(VOCAB)]
    candidates[5], candidates[6], candidates[7] = [10, 11], [12], [13, 10]
    shortlist = VocabularyShortlist.from_candidates(candidates, always=[PAD, START, EOS, 40], target_vocab_size=VOCAB)
    input_ids = torch.tensor([[5, 6, EOS], [7, PAD, PAD]])
    assert shortlist.target_ids(input_ids, (input_ids != PAD).long()).tolist() == [0, 1, 2, 10, 11, 12, 13, 40]
    # a padded position of token 6 does not count; `include` adds tokens
    assert shortlist.target_ids(torch.tensor([[5, 6]]), torch.tensor([[1, 0]]), include=[44]).tolist() == \
        [0, 1, 2, 10, 11, 40, 44]
    model = model_of("transformer_seq2seq")
    with torch.no_grad():
        out = model.generate(input_ids=input_ids, attention_mask=(input_ids != PAD).long(), max_new_tokens=8,
                             shortlist=shortlist)
    assert set(out.unique().tolist()) <= {0, 1, 2, 10, 11, 12, 13, 40}
    assert len(set(out.unique().tolist()) - set(SPECIAL)) > 1


@pytest.mark.parametrize("model_type", FAMILIES)
def test_generate_with_a_shortlist_equals_generate_over_its_output_vocabulary(model_type, tmp_path):
    """``shortlist=`` (the object, its folder or its file) decodes as ``output_vocabulary=`` the batch's union."""
    torch.manual_seed(1)
    candidates = [torch.randint(3, VOCAB, (6,)).tolist() for _ in range(VOCAB)]
    shortlist = VocabularyShortlist.from_candidates(candidates, always=SPECIAL, target_vocab_size=VOCAB)
    shortlist.save_pretrained(tmp_path)
    batch = source_batch()
    union = OutputVocabulary(shortlist.target_ids(batch["input_ids"], batch["attention_mask"]), VOCAB)
    model = model_of(model_type)
    expected = generate(model, num_beams=3, output_vocabulary=union)
    for given in (shortlist, tmp_path, tmp_path / SHORTLIST_FILE, str(tmp_path)):
        output = generate(model, num_beams=3, shortlist=given)
        assert torch.equal(output.sequences, expected.sequences)
    assert set(expected.sequences.unique().tolist()) <= set(union.token_ids.tolist())


@pytest.mark.parametrize("model_type", FAMILIES)
def test_returned_scores_are_over_the_full_vocabulary_with_minus_infinity_off_the_shortlist(model_type):
    model = model_of(model_type)
    vocabulary = OutputVocabulary([*SPECIAL, 9, 14, 27], VOCAB)
    output = generate(model, output_vocabulary=vocabulary, output_logits=True)
    off = torch.ones(VOCAB, dtype=torch.bool)
    off[vocabulary.token_ids] = False
    for step in (*output.scores, *output.logits):
        assert step.shape[-1] == VOCAB
        assert step[:, off].isneginf().all() and step[:, ~off].isfinite().all()


def test_the_shortlist_file_round_trips_and_another_file_is_refused(tmp_path):
    candidates = [[(s * 7 + k) % VOCAB for k in range(s % 4)] for s in range(VOCAB)]
    shortlist = VocabularyShortlist.from_candidates(candidates, always=[0, 1, 2, 33], target_vocab_size=VOCAB,
                                                    metadata={"method": "test"})
    path = shortlist.save_pretrained(tmp_path)
    loaded = VocabularyShortlist.from_pretrained(tmp_path)
    assert [loaded.candidates(s) for s in range(VOCAB)] == candidates
    assert loaded.always.tolist() == [0, 1, 2, 33] and loaded.metadata == {"method": "test"}
    assert path.stat().st_size < 4096
    (tmp_path / "other.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        VocabularyShortlist.load(tmp_path / "other.safetensors")
    with pytest.raises(ValueError, match="build one with hf-s2s build-shortlist"):
        VocabularyShortlist.load(tmp_path / "missing.safetensors")


def test_what_a_shortlist_cannot_decode_is_refused_by_name():
    model = model_of("transformer_seq2seq")
    batch = source_batch()
    shortlist = VocabularyShortlist.from_candidates([[3]] * (VOCAB + 1), always=SPECIAL, target_vocab_size=VOCAB)
    with pytest.raises(ValueError, match="built for another vocabulary"):
        model.generate(**batch, shortlist=shortlist)
    vocabulary = OutputVocabulary(range(10), VOCAB)
    with pytest.raises(ValueError, match="logits_processor"):
        model.generate(**batch, output_vocabulary=vocabulary, logits_processor=LogitsProcessorList())
    with pytest.raises(ValueError, match="encoder_repetition_penalty"):
        model.generate(**batch, output_vocabulary=vocabulary, encoder_repetition_penalty=1.2)
    with pytest.raises(ValueError, match="600 target tokens"):
        model.generate(**batch, output_vocabulary=OutputVocabulary(range(10), 600))
    with pytest.raises(ValueError, match="is for decoding"):
        model(**batch, labels=batch["input_ids"], output_vocabulary=vocabulary)
    with pytest.raises(ValueError, match="outside the target vocabulary|must lie in the target vocabulary"):
        OutputVocabulary([3, VOCAB], VOCAB)
