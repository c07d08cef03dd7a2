"""Vocabulary shortlists in ``generate()`` (hf_s2s/models/shortlist.py), both families: a shortlist holding every
token decodes bit for bit as without one (greedy and beam, ids and scores); with a real shortlist each sentence
generates only its own list and decodes alike in a batch and alone; the output layer multiplies only the rows the
batch needs; the file round-trips; a folder loaded as remote code without hf_s2s decodes with it alike; what cannot
work is refused by name."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from hf_s2s.inference.int8 import quantize_int8
from hf_s2s.models.shortlist import SHORTLIST_FILE, OutputVocabulary, VocabularyShortlist
from tests.helpers import FAMILIES, run_without_hf_s2s
from tests.helpers import LEXICAL_EOS as EOS
from tests.helpers import LEXICAL_PAD as PAD
from tests.helpers import LEXICAL_START as START
from tests.helpers import LEXICAL_VOCAB as VOCAB
from tests.helpers import lexical_tiny_model as model_of
from tests.saved_folders import save_tiny_model_folder

SPECIAL = (PAD, START, EOS)


def source_batch():
    torch.manual_seed(0)
    input_ids = torch.randint(3, VOCAB, (4, 9))
    input_ids[1, 6:] = PAD
    input_ids[3, 4:] = PAD
    return {"input_ids": input_ids, "attention_mask": (input_ids != PAD).long()}


def small_shortlist(per_token: int = 3):
    """Each source token s -> ``per_token`` target tokens; nothing kept always (the special tokens join in
    generate())."""
    return VocabularyShortlist.from_candidates([[(s * k) % 47 + 3 for k in (7, 3, 11)[:per_token]]
                                                for s in range(VOCAB)], always=[], target_vocab_size=VOCAB)


def generate(model, **kwargs):
    with torch.no_grad():
        return model.generate(**source_batch(), max_new_tokens=12, return_dict_in_generate=True, output_scores=True,
                              **kwargs)


def until_eos(row: torch.Tensor) -> list[int]:
    tokens = row.tolist()
    return tokens[: tokens.index(EOS) + 1] if EOS in tokens[1:] else tokens


@pytest.mark.parametrize("num_beams", [1, 4])
@pytest.mark.parametrize("model_type", FAMILIES)
def test_a_shortlist_holding_every_token_decodes_bit_for_bit_as_without_one(model_type, num_beams):
    model = model_of(model_type)
    everything = VocabularyShortlist.from_candidates([[]] * VOCAB, always=range(VOCAB), target_vocab_size=VOCAB)
    full = generate(model, num_beams=num_beams)
    shortlisted = generate(model, num_beams=num_beams, shortlist=everything)
    assert torch.equal(full.sequences, shortlisted.sequences)
    assert all(torch.equal(a, b) for a, b in zip(full.scores, shortlisted.scores, strict=True))
    if num_beams > 1:
        assert torch.equal(full.sequences_scores, shortlisted.sequences_scores)


@pytest.mark.parametrize("num_beams", [1, 4])
@pytest.mark.parametrize("model_type", FAMILIES)
def test_each_sentence_generates_its_own_shortlist_alike_in_a_batch_and_alone(model_type, num_beams):
    model, shortlist, batch = model_of(model_type), small_shortlist(), source_batch()
    batched = generate(model, num_beams=num_beams, shortlist=shortlist).sequences
    assert not torch.equal(batched, generate(model, num_beams=num_beams).sequences)  # the shortlist changes things
    for row, (ids, mask) in enumerate(zip(batch["input_ids"], batch["attention_mask"], strict=True)):
        source = ids[mask.bool()][None]
        own = {t for s in source[0].tolist() for t in shortlist.candidates(s)} | set(SPECIAL)
        assert set(batched[row].tolist()) <= own
        with torch.no_grad():
            alone = model.generate(input_ids=source, max_new_tokens=12, num_beams=num_beams, shortlist=shortlist)
        assert until_eos(alone[0]) == until_eos(batched[row])


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
def test_the_output_layer_multiplies_only_the_rows_the_batch_needs(model_type):
    model, batch, shortlist = model_of(model_type), source_batch(), small_shortlist(per_token=1)
    rows = len(OutputVocabulary(shortlist.allowed(batch["input_ids"], batch["attention_mask"], SPECIAL)))
    assert rows < VOCAB // 2
    for given, width in ((None, VOCAB), (shortlist, rows)):
        with MatrixProducts() as products, torch.no_grad():
            model.generate(**batch, max_new_tokens=5, min_new_tokens=5, shortlist=given)
        widths = [shape[-1] for shape in products.shapes]
        assert widths.count(width) == 5  # one output-layer product per step, `width` columns wide
        assert given is None or VOCAB not in widths


def test_the_shortlist_file_round_trips_and_another_file_is_refused(tmp_path):
    candidates = [[(s * 7 + k) % VOCAB for k in range(s % 4)] for s in range(VOCAB)]
    shortlist = VocabularyShortlist.from_candidates(candidates, always=[0, 1, 2, 33], target_vocab_size=VOCAB,
                                                    metadata={"method": "test"})
    shortlist.save_pretrained(tmp_path)
    loaded = VocabularyShortlist.from_pretrained(tmp_path)
    assert [loaded.candidates(s) for s in range(VOCAB)] == candidates
    assert loaded.always.tolist() == [0, 1, 2, 33] and loaded.metadata == {"method": "test"}
    (tmp_path / "other.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        VocabularyShortlist.load(tmp_path / "other.safetensors")
    with pytest.raises(ValueError, match="build one with hf-s2s build-shortlist"):
        VocabularyShortlist.load(tmp_path / "missing.safetensors")


def test_what_a_shortlist_cannot_decode_is_refused_by_name():
    model, batch = model_of("transformer_seq2seq"), source_batch()
    other = VocabularyShortlist.from_candidates([[3]] * (VOCAB + 1), always=SPECIAL, target_vocab_size=VOCAB)
    with pytest.raises(ValueError, match="built for another vocabulary"):
        model.generate(**batch, shortlist=other)
    with pytest.raises(ValueError, match="shortlist must be a VocabularyShortlist"):
        model.generate(**batch, shortlist="shortlist.safetensors")
    with pytest.raises(ValueError, match="pass input_ids"):
        model.generate(inputs_embeds=torch.zeros(1, 3, 32), shortlist=small_shortlist())
    allowed = small_shortlist().allowed(batch["input_ids"], batch["attention_mask"], SPECIAL)
    with pytest.raises(ValueError, match="is for decoding"):
        model(**batch, labels=batch["input_ids"], output_vocabulary=OutputVocabulary(allowed))
    quantize_int8(model, inplace=True)
    with pytest.raises(ValueError, match="nn.Linear output layer"):
        model.generate(**batch, shortlist=small_shortlist())


@pytest.mark.slow
def test_a_folder_loaded_as_remote_code_without_hf_s2s_decodes_with_its_shortlist_alike(tmp_path):
    """shortlist.py ships with the model code: a user without hf_s2s reads the folder's shortlist with it."""
    folder = save_tiny_model_folder(tmp_path / "model", "transformer_seq2seq", seed=1)
    loaded, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    size = len(tokenizer)
    VocabularyShortlist.from_candidates([[(s * 5) % size, (s * 3) % size] for s in range(size)], always=[],
                                        target_vocab_size=size).save_pretrained(folder)
    sources = ["a b c d e", "f g", "h i j"]
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = loaded.generate(**batch, max_new_tokens=10, num_beams=3,
                                   shortlist=VocabularyShortlist.from_pretrained(folder)).tolist()
    got = run_without_hf_s2s(f"""
        import importlib, json, torch
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
        model = AutoModelForSeq2SeqLM.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
        tokenizer = AutoTokenizer.from_pretrained({str(folder)!r}, trust_remote_code=True)
        shortlist = importlib.import_module(type(model).__module__.rsplit(".", 1)[0] + ".shortlist")
        batch = tokenizer({sources!r}, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(**batch, max_new_tokens=10, num_beams=3,
                                 shortlist=shortlist.VocabularyShortlist.from_pretrained({str(folder)!r}))
        print(json.dumps(out.tolist()))
    """, cwd=tmp_path)
    assert got == expected
    assert (folder / SHORTLIST_FILE).is_file()
