"""Vocabulary shortlists in ``generate()`` (hf_s2s/models/shortlist.py), both families: a shortlist holding every
token decodes bit for bit as without one (greedy and beam, ids and scores); with a real shortlist each sentence
generates only its own list and decodes alike in a batch and alone; the output layer multiplies only the rows the
batch needs; the file round-trips (hypothesis: any shortlist saved reads back, any damaged file is a ValueError naming
it); an ensemble decodes with one; a folder loaded as remote code decodes with its own shortlist class and with
hf_s2s's alike; what cannot work is refused by name."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, LogitsProcessor, LogitsProcessorList

from hf_s2s.cli.translate import main as translate_main
from hf_s2s.inference.ensemble import Seq2SeqEnsemble
from hf_s2s.inference.int8 import quantize_int8
from hf_s2s.models.shortlist import (
    SHORTLIST_FILE,
    OutputVocabulary,
    VocabularyShortlist,
    shortlist_from_texts,
)
from hf_s2s.models.term_constraints import Glossary
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


# What the compact search is compared with, each a generate() call's keywords (the shortlist's tokens in the terms)
CALLS = {
    "plain": {},
    "target terms": {"target_terms": [[[17, 24]], [], [[10]], [[31], [45, 38]]]},
    "generation settings": {"suppress_tokens": [24, 7], "bad_words_ids": [[10, 17], [5]], "no_repeat_ngram_size": 2,
                            "repetition_penalty": 1.3, "min_new_tokens": 3},
}


def model_or_ensemble(model_type: str):
    """A family's tiny model, or ("ensemble") a Transformer and an RNN of one vocabulary decoded as one."""
    if model_type != "ensemble":
        return model_of(model_type)
    return Seq2SeqEnsemble([model_of(family) for family in FAMILIES]).eval()


def allowed_of(batch, shortlist, call: dict) -> torch.Tensor:
    """The (B, V) tokens each sentence may generate, as generate(shortlist=...) finds them."""
    terms = [[token for term in sentence for token in term] for sentence in call.get("target_terms") or []]
    return shortlist.allowed(batch["input_ids"], batch["attention_mask"], SPECIAL, terms)


@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize("num_beams", [1, 4])
@pytest.mark.parametrize("model_type", [*FAMILIES, "ensemble"])
def test_the_compact_search_decodes_as_the_full_vocabulary_reference(model_type, num_beams, call):
    """Compact ids (the search over the K shortlisted tokens) against the reference path (the K columns written into
    V-wide logits, -inf elsewhere; everything after on the full vocabulary, as before the compact search): the same
    ids; greedy scores bit for bit (no softmax), beam search's log-probabilities to the rounding of a softmax summed
    over K terms instead of V."""
    model, shortlist, batch, kwargs = model_or_ensemble(model_type), small_shortlist(), source_batch(), CALLS[call]
    reference_vocabulary = OutputVocabulary(allowed_of(batch, shortlist, kwargs), compact=False)
    reference = generate(model, num_beams=num_beams, output_vocabulary=reference_vocabulary, output_logits=True,
                         **kwargs)
    compact = generate(model, num_beams=num_beams, shortlist=shortlist, output_logits=True, **kwargs)
    assert torch.equal(compact.sequences, reference.sequences)
    assert compact.scores[0].shape == reference.scores[0].shape and compact.scores[0].shape[-1] == VOCAB
    if num_beams == 1 and model_type != "ensemble":  # an ensemble's mean is of log-softmaxed members: rounding
        assert all(torch.equal(a, b) for a, b in zip(compact.scores, reference.scores, strict=True))
    else:
        for a, b in zip(compact.scores, reference.scores, strict=True):
            assert torch.equal(a.isneginf(), b.isneginf())
            torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    if num_beams > 1:
        torch.testing.assert_close(compact.sequences_scores, reference.sequences_scores, rtol=0, atol=1e-5)
        assert torch.equal(compact.beam_indices, reference.beam_indices)
    if model_type != "ensemble":  # the raw output layer: the same K columns
        assert all(torch.equal(a, b) for a, b in zip(compact.logits, reference.logits, strict=True))


@pytest.mark.parametrize("call", ["plain", "target terms"])
@pytest.mark.parametrize("num_beams", [1, 4])
def test_an_ensemble_with_a_shortlist_holding_every_token_decodes_bit_for_bit_as_without_one(num_beams, call):
    model = model_or_ensemble("ensemble")
    everything = VocabularyShortlist.from_candidates([[]] * VOCAB, always=range(VOCAB), target_vocab_size=VOCAB)
    full = generate(model, num_beams=num_beams, **CALLS[call])
    shortlisted = generate(model, num_beams=num_beams, shortlist=everything, **CALLS[call])
    assert torch.equal(full.sequences, shortlisted.sequences)
    assert all(torch.equal(a, b) for a, b in zip(full.scores, shortlisted.scores, strict=True))


class MaximumsSeen(LogitsProcessor):
    """A call's own processor, in full ids: it bans token 24 and records the widths of the scores and the ids it
    saw."""

    def __init__(self):
        self.widths, self.ids = set(), set()

    def __call__(self, input_ids, scores):
        self.widths.add(scores.shape[-1])
        self.ids |= set(input_ids.unique().tolist())
        scores = scores.clone()
        scores[:, 24] = float("-inf")
        return scores


@pytest.mark.parametrize("model_type", FAMILIES)
def test_a_processor_of_the_caller_sees_full_ids_and_decodes_as_on_the_reference_path(model_type):
    model, shortlist, batch = model_of(model_type), small_shortlist(), source_batch()
    results, seen_ids = {}, {}
    for name, passed in (("compact", {"shortlist": shortlist}),
                         ("reference", {"output_vocabulary": OutputVocabulary(allowed_of(batch, shortlist, {}),
                                                                              compact=False)})):
        seen = MaximumsSeen()
        results[name] = generate(model, num_beams=3, logits_processor=LogitsProcessorList([seen]), **passed)
        assert seen.widths == {VOCAB}
        assert 24 not in results[name].sequences
        seen_ids[name] = seen.ids
    assert torch.equal(results["compact"].sequences, results["reference"].sequences)
    assert seen_ids["compact"] == seen_ids["reference"]  # full ids, as on the reference path


class ShapesMade(TorchDispatchMode):
    """The shape of every tensor an operation returns while active."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for tensor in result if isinstance(result, tuple | list) else [result]:
            if torch.is_tensor(tensor):
                self.shapes.append(tuple(tensor.shape))
        return result


@pytest.mark.parametrize("num_beams", [1, 4])
@pytest.mark.parametrize("model_type", FAMILIES)
def test_the_search_never_makes_a_tensor_as_wide_as_the_vocabulary(model_type, num_beams):
    """The output layer, the processors (the length bound, the term constraints), the softmax and beam search's top-k
    all run over the K shortlisted tokens: no operation of the decoding returns a tensor V wide."""
    model, batch, shortlist = model_of(model_type), source_batch(), small_shortlist(per_token=1)
    vocabulary = OutputVocabulary(allowed_of(batch, shortlist, CALLS["target terms"]))
    assert len(vocabulary) < VOCAB - 10
    with ShapesMade() as made, torch.no_grad():
        out = model.generate(**batch, max_new_tokens=8, num_beams=num_beams, output_vocabulary=vocabulary,
                             **CALLS["target terms"])
    widths = {shape[-1] for shape in made.shapes if len(shape) >= 2}
    assert len(vocabulary) in widths and VOCAB not in widths
    assert set(out.unique().tolist()) <= set(vocabulary.token_ids.tolist())  # mapped back to full ids


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
    for decoded_with, width in ((None, VOCAB), (shortlist, rows)):
        with MatrixProducts() as products, torch.no_grad():
            model.generate(**batch, max_new_tokens=5, min_new_tokens=5, shortlist=decoded_with)
        widths = [shape[-1] for shape in products.shapes]
        assert widths.count(width) == 5  # one output-layer product per step, `width` columns wide
        assert decoded_with is None or VOCAB not in widths


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
    with pytest.raises(ValueError, match="shortlist must be a vocabulary shortlist, an object with check_fits"):
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
def test_a_user_without_hf_s2s_builds_a_shortlist_and_matches_glossary_terms_with_the_folders_code(tmp_path):
    """shortlist.py and term_constraints.py ship with the model code: a user without hf_s2s builds a shortlist from a
    corpus, saves and reads it, and turns a glossary into generate()'s target terms with the folder's own copies, as
    docs/inference.md shows, and gets what hf_s2s gives (the same file, the same tokens)."""
    folder = save_tiny_model_folder(tmp_path / "model", "transformer_seq2seq", seed=1)
    loaded, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    pairs = [("a b c", "c b a"), ("d e", "e d"), ("f g h", "h g f"), ("a d", "d a"), ("i j", "j i")]
    sources = ["a b c d e", "f g", "h i j"]
    built = shortlist_from_texts(tokenizer, *zip(*pairs, strict=True), source_vocab_size=loaded.config.vocab_size,
                                 target_vocab_size=loaded.config.target_vocab_size, best=3, first=2)
    built.save_pretrained(folder)
    glossary = Glossary.from_pairs({"f g": "j j", "h": "b"})
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = loaded.generate(**batch, max_new_tokens=10, num_beams=3, shortlist=built,
                                   target_terms=glossary.target_terms(batch["input_ids"], tokenizer)).tolist()
    got = run_without_hf_s2s(f"""
        import importlib, json, torch
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
        folder = {str(folder)!r}
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        code = type(model).__module__.rsplit(".", 1)[0]  # the folder's code, as transformers imported it
        shortlists = importlib.import_module(code + ".shortlist")
        terminology = importlib.import_module(code + ".term_constraints")
        sources, targets = zip(*{pairs!r})
        built = shortlists.shortlist_from_texts(tokenizer, sources, targets, source_vocab_size=model.config.vocab_size,
                                                target_vocab_size=model.config.target_vocab_size, best=3, first=2)
        built.save("rebuilt.safetensors")
        shortlist = shortlists.VocabularyShortlist.load("rebuilt.safetensors")
        glossary = terminology.Glossary.from_pairs({{"f g": "j j", "h": "b"}})
        glossary.check(tokenizer, max_new_tokens=10)
        batch = tokenizer({sources!r}, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(**batch, max_new_tokens=10, num_beams=3, shortlist=shortlist,
                                 target_terms=glossary.target_terms(batch["input_ids"], tokenizer))
        print(json.dumps(out.tolist()))
    """, cwd=tmp_path)
    assert got == expected
    rebuilt = VocabularyShortlist.load(tmp_path / "rebuilt.safetensors")
    for field in ("offsets", "targets", "always"):
        assert torch.equal(getattr(rebuilt, field), getattr(built, field)), field
    assert rebuilt.metadata == built.metadata  # the vocabulary fingerprint among them


def shortlist_bytes(shortlist: VocabularyShortlist, tmp_path) -> bytes:
    shortlist.save(tmp_path / "s.safetensors")
    return (tmp_path / "s.safetensors").read_bytes()


def test_a_damaged_header_is_refused_naming_the_file_and_the_field(tmp_path):
    """A header field that is not a number (written by hand, or damaged) names the file and the field, never
    int()'s message."""
    path = tmp_path / SHORTLIST_FILE
    tensors = {"offsets": torch.zeros(3, dtype=torch.int64), "targets": torch.zeros(0, dtype=torch.int32),
               "always": torch.zeros(0, dtype=torch.int32)}
    header = {"format": "hf_s2s-shortlist-1", "source_vocab_size": "2", "target_vocab_size": "2 tokens"}
    save_file(tensors, str(path), metadata=header)
    with pytest.raises(ValueError, match=rf"{path}: its header's field 'target_vocab_size' is '2 tokens', not a whole "
                                         "number"):
        VocabularyShortlist.load(path)
    save_file(tensors, str(path), metadata={**header, "target_vocab_size": "2", "info": "{not json"})
    with pytest.raises(ValueError, match=rf"{path}: its header's field 'info' is not JSON"):
        VocabularyShortlist.load(path)
    save_file({**tensors, "offsets": torch.tensor([0, 2, 1])}, str(path), metadata={**header, "target_vocab_size": "2"})
    with pytest.raises(ValueError, match=rf"{path}: a shortlist's offsets must be .* non-decreasing"):
        VocabularyShortlist.load(path)


candidate_lists = st.integers(2, 12).flatmap(lambda size: st.tuples(
    st.lists(st.lists(st.integers(0, size - 1), max_size=4), min_size=1, max_size=10),
    st.lists(st.integers(0, size - 1), max_size=4), st.just(size)))


@given(drawn=candidate_lists)
@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_reader_gives_back_what_was_saved(tmp_path, drawn):
    candidates, always, size = drawn
    saved = VocabularyShortlist.from_candidates(candidates, always=always, target_vocab_size=size,
                                                metadata={"method": "test"})
    read = VocabularyShortlist.from_bytes(shortlist_bytes(saved, tmp_path))
    assert [read.candidates(s) for s in range(len(candidates))] == candidates
    assert read.always.tolist() == sorted(set(always)) and read.metadata == {"method": "test"}
    assert (read.source_vocab_size, read.target_vocab_size) == (len(candidates), size)


@given(data=st.data())
@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_reader_refuses_any_damaged_file_with_a_value_error_naming_it(tmp_path, data):
    """Bytes cut, flipped or inserted anywhere in a valid file, header included: either a shortlist that passes every
    check of the constructor comes back, or a ValueError that names the file; never another exception (a crash in
    a server that reads it again when it changes)."""
    valid = shortlist_bytes(small_shortlist(), tmp_path)
    edit = data.draw(st.sampled_from(["cut", "flip", "insert"]))
    position = data.draw(st.integers(0, len(valid) - 1))
    if edit == "cut":
        damaged = valid[:position]
    elif edit == "flip":
        damaged = valid[:position] + bytes([valid[position] ^ data.draw(st.integers(1, 255))]) + valid[position + 1:]
    else:
        damaged = valid[:position] + data.draw(st.binary(min_size=1, max_size=8)) + valid[position:]
    try:
        read = VocabularyShortlist.from_bytes(damaged, "the file")
    except ValueError as error:
        assert "the file" in str(error)
    else:
        assert read.offsets.shape == (read.source_vocab_size + 1,)


@pytest.mark.parametrize("num_beams", [1, 3])
def test_an_ensemble_decodes_with_a_shortlist_as_with_none_when_it_holds_every_token(num_beams):
    """An ensemble took shortlist= and failed in transformers' argument check; now each member's output layer
    computes the shortlisted rows and the mean is over them."""
    members = [model_of("transformer_seq2seq"), model_of("rnn_seq2seq")]
    ensemble = Seq2SeqEnsemble(members)
    everything = VocabularyShortlist.from_candidates([[]] * VOCAB, always=range(VOCAB), target_vocab_size=VOCAB)
    full = generate(ensemble, num_beams=num_beams)
    shortlisted = generate(ensemble, num_beams=num_beams, shortlist=everything)
    assert torch.equal(full.sequences, shortlisted.sequences)
    narrow = generate(ensemble, num_beams=num_beams, shortlist=small_shortlist()).sequences
    batch = source_batch()
    for row, (ids, mask) in enumerate(zip(batch["input_ids"], batch["attention_mask"], strict=True)):
        own = {t for s in ids[mask.bool()].tolist() for t in small_shortlist().candidates(s)} | set(SPECIAL)
        assert set(narrow[row].tolist()) <= own


def test_hf_s2s_translate_decodes_an_ensemble_with_the_first_folders_shortlist(tmp_path, capsys):
    first = save_tiny_model_folder(tmp_path / "a", "transformer_seq2seq", seed=1)
    second = save_tiny_model_folder(tmp_path / "b", "transformer_seq2seq", seed=2)
    size = len(AutoTokenizer.from_pretrained(first))
    VocabularyShortlist.from_candidates([[]] * size, always=range(size), target_vocab_size=size).save_pretrained(first)
    source = tmp_path / "in.txt"
    source.write_text("a b c\nd e\n", encoding="utf-8")
    outputs = []
    for options in ([], ["--shortlist"]):
        assert translate_main([str(first), str(second), "--input", str(source), "--beams", "2", *options]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1] and outputs[0].count("\n") == 2


@pytest.mark.slow  # a fresh process
def test_the_package_shortlist_works_on_a_model_loaded_as_remote_code_before_hf_s2s(tmp_path):
    """docs/inference.md's VocabularyShortlist (hf_s2s's class) given to a model loaded with trust_remote_code=True
    before hf_s2s is imported (so the model is the folder's copy of the code): accepted, and it decodes as the
    folder's own class does. The check compared classes, and refused one VocabularyShortlist for the other."""
    folder = save_tiny_model_folder(tmp_path / "model", "transformer_seq2seq", seed=1)
    size = len(AutoTokenizer.from_pretrained(folder))
    VocabularyShortlist.from_candidates([[(s * 5) % size, (s * 3) % size] for s in range(size)], always=[],
                                        target_vocab_size=size).save_pretrained(folder)
    script = f"""
        import importlib, json, torch
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
        model = AutoModelForSeq2SeqLM.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
        tokenizer = AutoTokenizer.from_pretrained({str(folder)!r}, trust_remote_code=True)
        own = importlib.import_module(type(model).__module__.rsplit(".", 1)[0] + ".shortlist").VocabularyShortlist
        from hf_s2s.models.shortlist import VocabularyShortlist  # the package's, imported after the model loaded
        assert type(model).__module__.startswith("transformers_modules")
        batch = tokenizer(["a b c d e", "f g"], return_tensors="pt", padding=True)
        with torch.no_grad():
            out = [model.generate(**batch, max_new_tokens=8, shortlist=cls.from_pretrained({str(folder)!r})).tolist()
                   for cls in (own, VocabularyShortlist)]
        print(json.dumps(out))
    """
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf_home")}
    completed = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], cwd=tmp_path, env=env,
                               capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    own, package = json.loads(completed.stdout.strip().splitlines()[-1])
    assert own == package


@pytest.mark.slow
def test_a_folder_loaded_as_remote_code_without_hf_s2s_decodes_with_its_shortlist_alike(tmp_path):
    """shortlist.py and output_vocabulary.py ship with the model code: a user without hf_s2s reads the folder's shortlist
    with it and decodes over its compact ids alike, ids and scores, greedy and beam."""
    folder = save_tiny_model_folder(tmp_path / "model", "transformer_seq2seq", seed=1)
    loaded, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    size = len(tokenizer)
    VocabularyShortlist.from_candidates([[(s * 5) % size, (s * 3) % size] for s in range(size)], always=[],
                                        target_vocab_size=size).save_pretrained(folder)
    sources = ["a b c d e", "f g", "h i j"]
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    shortlist = VocabularyShortlist.from_pretrained(folder)
    with torch.no_grad():
        expected = [loaded.generate(**batch, max_new_tokens=10, num_beams=beams, shortlist=shortlist,
                                    return_dict_in_generate=True, output_scores=True) for beams in (1, 3)]
    expected = [[out.sequences.tolist(), torch.stack(out.scores).tolist()] for out in expected]
    got = run_without_hf_s2s(f"""
        import importlib, json, torch
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
        model = AutoModelForSeq2SeqLM.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
        tokenizer = AutoTokenizer.from_pretrained({str(folder)!r}, trust_remote_code=True)
        shortlist = importlib.import_module(type(model).__module__.rsplit(".", 1)[0] + ".shortlist")
        batch = tokenizer({sources!r}, return_tensors="pt", padding=True)
        results = []
        with torch.no_grad():
            for beams in (1, 3):
                out = model.generate(**batch, max_new_tokens=10, num_beams=beams, return_dict_in_generate=True,
                                     output_scores=True,
                                     shortlist=shortlist.VocabularyShortlist.from_pretrained({str(folder)!r}))
                results.append([out.sequences.tolist(), torch.stack(out.scores).tolist()])
        print(json.dumps(results))
    """, cwd=tmp_path)
    assert got == expected  # ids and scores (floats written by json exactly), greedy and beam
    assert (folder / SHORTLIST_FILE).is_file()
