"""Checkpoint ensembles at decoding time (hf_s2s.inference.ensemble, `hf-s2s translate A B`): an ensemble of one model or of
copies of one model decodes exactly as the model does (tokens and scores, greedy and beam search, which reorders
every member's cache); a mixed-family ensemble averages probabilities as documented and decodes a padded batch as
each sentence alone; members of different vocabularies are refused, naming the difference."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import hf_s2s  # noqa: F401
from hf_s2s.data.tokenization import train_tokenizer_from_texts
from hf_s2s.inference.ensemble import Seq2SeqEnsemble, load_for_decoding
from hf_s2s.inference.translate import translate
from hf_s2s.models.loading import load_model, load_tokenizer
from tests.helpers import FAMILIES
from tests.saved_folders import TEXTS, save_tiny_model_folder, separate_vocabulary_folders

ROOT = Path(__file__).resolve().parent.parent
SENTENCES = ["a b c d e", "f g", "h i j a b c", "d"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    work = tmp_path_factory.mktemp("ensemble")
    seeds = {"transformer_seq2seq": 3, "rnn_seq2seq": 0}  # models whose outputs differ between these sentences
    return {family: save_tiny_model_folder(work / family, family, seed=seeds[family]) for family in FAMILIES}


def generate(model, tokenizer, sentences, num_beams):
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model.generate(**batch, num_beams=num_beams, max_new_tokens=8, output_scores=True,
                              return_dict_in_generate=True)


@pytest.mark.slow
@pytest.mark.parametrize("num_beams", [1, 3])
@pytest.mark.parametrize("family", FAMILIES)
def test_an_ensemble_of_one_and_of_two_copies_decodes_as_the_model(folders, family, num_beams):
    model, tokenizer = load_model(folders[family]), load_tokenizer(folders[family])
    alone = translate(model, tokenizer, SENTENCES, num_beams=num_beams, max_new_tokens=8)
    assert len({hyps[0].text for hyps in alone}) > 1  # the model's outputs depend on the input: the test has teeth
    for members in ([model], [model, load_model(folders[family])]):  # the copy is a second model of equal weights
        ensemble = Seq2SeqEnsemble(members)
        got = translate(ensemble, tokenizer, SENTENCES, num_beams=num_beams, max_new_tokens=8)
        assert [[h.text for h in hyps] for hyps in got] == [[h.text for h in hyps] for hyps in alone]
        assert [hyps[0].score for hyps in got] == pytest.approx([hyps[0].score for hyps in alone], abs=1e-5)
        expected, output = generate(model, tokenizer, SENTENCES, num_beams), generate(ensemble, tokenizer,
                                                                                      SENTENCES, num_beams)
        assert torch.equal(output.sequences, expected.sequences)


def test_a_mixed_family_ensemble_averages_probabilities_and_batched_equals_single(folders):
    transformer, rnn = (load_model(folders[family]) for family in FAMILIES)
    tokenizer = load_tokenizer(folders["transformer_seq2seq"])
    ensemble = Seq2SeqEnsemble([transformer, rnn])
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    start = torch.full((len(SENTENCES), 1), transformer.config.decoder_start_token_id)
    with torch.no_grad():
        logits = ensemble(**batch, decoder_input_ids=start).logits  # (B, 1, V)
        probs = [member(**batch, decoder_input_ids=start).logits.softmax(dim=-1) for member in (transformer, rnn)]
    torch.testing.assert_close(logits, ((probs[0] + probs[1]) / 2).log(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits.exp().sum(dim=-1), torch.ones(len(SENTENCES), 1))  # a distribution

    batched = generate(ensemble, tokenizer, SENTENCES, num_beams=3)
    for row, sentence in enumerate(SENTENCES):
        single = generate(ensemble, tokenizer, [sentence], num_beams=3)
        length = single.sequences.shape[1]
        assert batched.sequences[row, :length].tolist() == single.sequences[0].tolist()
        # beam search fills a row that ended early with `pad_token_id or eos_token_id` (transformers 5.23): </s> here,
        # where pad is id 0
        fill = tokenizer.pad_token_id or tokenizer.eos_token_id
        assert (batched.sequences[row, length:] == fill).all()
        assert batched.sequences_scores[row].item() == pytest.approx(single.sequences_scores[0].item(), abs=1e-5)
    alone = [generate(member, tokenizer, SENTENCES, num_beams=3).sequences for member in (transformer, rnn)]
    assert not torch.equal(alone[0], alone[1])  # the members disagree: the ensemble is not one of them
    assert not torch.equal(batched.sequences, alone[0]) or not torch.equal(batched.sequences, alone[1])


def test_without_attention_mask_an_ensemble_finds_the_padding_from_the_pad_id(folders):
    """generate(input_ids) on a right-padded batch: the members attend with the mask the pad id gives, as each family
    does alone, in every decoding step."""
    ensemble = Seq2SeqEnsemble([load_model(folders[family]) for family in FAMILIES])
    tokenizer = load_tokenizer(folders["transformer_seq2seq"])
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    assert (batch["attention_mask"] == 0).any()  # some padding: the test has teeth
    with torch.no_grad():
        masked = ensemble.generate(**batch, num_beams=3, max_new_tokens=8)
        inferred = ensemble.generate(input_ids=batch["input_ids"], num_beams=3, max_new_tokens=8)
    assert torch.equal(inferred, masked)


def test_members_of_different_vocabularies_are_refused_naming_the_difference(folders, tmp_path):
    transformer = load_model(folders["transformer_seq2seq"])
    other_eos = save_tiny_model_folder(tmp_path / "eos", "rnn_seq2seq")
    rnn = load_model(other_eos)
    rnn.config.eos_token_id = 7
    with pytest.raises(ValueError, match=r"model 1 does not share the vocabulary of model 0: eos_token_id 7 "
                                         r"\(against 2\); an ensemble averages the members' next-token distributions"):
        Seq2SeqEnsemble([transformer, rnn])
    with pytest.raises(ValueError, match="an ensemble needs at least one model"):
        Seq2SeqEnsemble([])

    # Equal sizes, different tokens: the tokenizers are compared before any model is loaded.
    reversed_texts = [text[::-1].upper() for text in TEXTS]
    other = train_tokenizer_from_texts(reversed_texts, vocab_size=280, min_frequency=1)
    other_folder = save_tiny_model_folder(tmp_path / "other", "transformer_seq2seq", tokenizer=other)
    with pytest.raises(ValueError, match=f"{other_folder} does not share the vocabulary of "
                                         f"{folders['transformer_seq2seq']}: vocabularies of 280 and 280 tokens"):
        load_for_decoding([folders["transformer_seq2seq"], other_folder])


@pytest.mark.slow
def test_members_of_one_source_but_different_target_vocabularies_are_refused(tmp_path):
    """A de-en and a de-fr model of equal sizes: the old check compared the source vocabularies only, and the
    ensemble averaged distributions over unrelated target tokens (garbage, exit 0)."""
    folders = separate_vocabulary_folders(tmp_path)
    done = run_translate(str(folders["de_en"]), str(folders["de_fr"]), stdin="a b c\n")
    assert done.returncode == 1 and done.stdout == "" and "Traceback" not in done.stderr
    assert (f"error: {folders['de_fr']} does not share the vocabulary of {folders['de_en']}: target vocabularies of "
            "280 and 280 tokens: ") in done.stderr
    assert "an ensemble averages the members' next-token distributions" in done.stderr


def run_translate(*args: str, stdin: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "translate.py"), *args], input=stdin,
                          capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_translate_script_takes_several_folders(folders):
    stdin = "\n".join(SENTENCES) + "\n"
    one = run_translate(str(folders["rnn_seq2seq"]), "--beams", "3", "--scores", "--max-new-tokens", "8",
                        stdin=stdin)
    two = run_translate(str(folders["rnn_seq2seq"]), str(folders["rnn_seq2seq"]), "--beams", "3", "--scores",
                        "--max-new-tokens", "8", stdin=stdin)
    assert one.returncode == 0 and two.returncode == 0, two.stderr
    assert two.stdout == one.stdout and len(one.stdout.splitlines()) == len(SENTENCES)
    mixed = run_translate(str(folders["rnn_seq2seq"]), str(folders["transformer_seq2seq"]), "--beams", "3",
                          "--max-new-tokens", "8", stdin=stdin)
    assert mixed.returncode == 0 and len(mixed.stdout.splitlines()) == len(SENTENCES), mixed.stderr
    refused = run_translate(str(folders["rnn_seq2seq"]), str(folders["rnn_seq2seq"]), "--plot-alignment", "a.png",
                            stdin=stdin)
    assert refused.returncode == 1 and "error: --plot-alignment plots one model's attention; got 2" in refused.stderr
