"""Coverage penalty in beam search (hf_s2s.inference.penalties, `translate --coverage-penalty`): beta 0 decodes exactly as
today; with beta > 0 every returned hypothesis scores exactly GNMT's s(Y, X) = log P / lp + cp, recomputed here from
a teacher-forced pass, and the penalty changes which hypothesis wins, towards the higher s(Y, X)."""

import pytest
import torch
from transformers import LogitsProcessorList

import hf_s2s  # noqa: F401
from hf_s2s.inference.decoding import check_call
from hf_s2s.inference.ensemble import Seq2SeqEnsemble
from hf_s2s.inference.penalties import CoveragePenaltyLogitsProcessor, coverage_penalty
from hf_s2s.inference.translate import translate
from hf_s2s.models.loading import load_model, load_tokenizer
from tests.helpers import FAMILIES
from tests.saved_folders import save_tiny_model_folder

SENTENCES = ["a b c d e f g", "h i j", "a c e g i b d", "f", "j i h g f e d c"]
SEEDS = {"transformer_seq2seq": 3, "rnn_seq2seq": 0}
NEW_TOKENS = 10


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    work = tmp_path_factory.mktemp("coverage")
    return {family: save_tiny_model_folder(work / family, family, seed=SEEDS[family]) for family in FAMILIES}


def beam_search(model, batch, beta: float | None, length_penalty: float = 1.0, nbest: int = 1):
    """generate() with 4 beams: the model alone (beta None) or wrapped with the coverage penalty beta."""
    kwargs = dict(num_beams=4, max_new_tokens=NEW_TOKENS, length_penalty=length_penalty, output_scores=True,
                  return_dict_in_generate=True, num_return_sequences=nbest)
    with torch.no_grad():
        if beta is None:
            return model.generate(**batch, **kwargs)
        decoder = Seq2SeqEnsemble([model])
        processor = CoveragePenaltyLogitsProcessor(decoder, beta, length_penalty, model.config.eos_token_id,
                                                   max_length=1 + NEW_TOKENS)
        with decoder.tracking_coverage():
            return decoder.generate(**batch, logits_processor=LogitsProcessorList([processor]), **kwargs)


def gnmt_scores(model, batch, sequences, beta: float, length_penalty: float) -> torch.Tensor:
    """s(Y, X) of each row of ``sequences`` (B, 1 + T), from one teacher-forced pass: the log-probability of its
    tokens up to its first </s>, over length ** length_penalty, plus beta * sum_i log min(coverage_i, 1)."""
    eos = model.config.eos_token_id
    model.set_attn_implementation("eager")
    with torch.no_grad():
        outputs = model(**batch, decoder_input_ids=sequences[:, :-1], output_attentions=True)
    targets = sequences[:, 1:]  # (B, T)
    ended = (targets == eos).long().cumsum(dim=1)
    real = ended - (targets == eos).long() == 0  # up to and including the first </s> (a random model may emit pad)
    log_probs = outputs.logits.log_softmax(dim=-1).gather(-1, targets[..., None])[..., 0]  # (B, T)
    attention = outputs.cross_attentions[-1].mean(dim=1)  # (B, T, S)
    coverage = (attention * real[..., None]).sum(dim=1)  # (B, S)
    lengths = real.sum(dim=1)
    penalty = coverage_penalty(coverage, batch["attention_mask"].bool(), beta)
    return (log_probs * real).sum(dim=1) / lengths ** length_penalty + penalty


@pytest.mark.parametrize("family", FAMILIES)
def test_beta_zero_decodes_as_without_the_penalty(folders, family):
    model, tokenizer = load_model(folders[family]), load_tokenizer(folders[family])
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    plain, zero = beam_search(model, batch, None), beam_search(model, batch, 0.0)
    assert torch.equal(zero.sequences, plain.sequences)
    torch.testing.assert_close(zero.sequences_scores, plain.sequences_scores)
    assert model.config._attn_implementation == ("sdpa" if family == "transformer_seq2seq" else "eager")  # restored


@pytest.mark.parametrize("length_penalty", [1.0, 0.6])
@pytest.mark.parametrize("family", FAMILIES)
def test_the_penalty_scores_and_ranks_hypotheses_as_gnmt_eq_14(folders, family, length_penalty):
    model, tokenizer = load_model(folders[family]), load_tokenizer(folders[family])
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    beta, nbest = 2.0, 4
    plain = beam_search(model, batch, None, length_penalty)
    penalized = beam_search(model, batch, beta, length_penalty, nbest=nbest)
    # Every returned hypothesis (those cut by the length limit too) scores s(Y, X) = log P / lp + cp, recomputed
    # independently, so the n-best lists are ranked by it.
    repeated = {key: value.repeat_interleave(nbest, dim=0) for key, value in batch.items()}
    expected = gnmt_scores(model, repeated, penalized.sequences, beta, length_penalty)
    torch.testing.assert_close(penalized.sequences_scores, expected, atol=1e-4, rtol=1e-4)
    unpenalized = gnmt_scores(model, repeated, penalized.sequences, 0.0, length_penalty)
    assert (expected <= unpenalized).all() and (expected < unpenalized).sum() > len(expected) // 2  # it has teeth
    # The penalty changes the winner of some sentences.
    width = max(plain.sequences.shape[1], penalized.sequences.shape[1])
    best = [torch.nn.functional.pad(s, (0, width - s.shape[1]), value=model.config.pad_token_id)
            for s in (plain.sequences, penalized.sequences[::nbest])]
    assert not torch.equal(best[0], best[1])


def test_the_penalty_is_refused_without_beams_or_below_zero(folders):
    with pytest.raises(ValueError, match="coverage_penalty \\(--coverage-penalty\\) must be a finite number in \\[0, 10\\]"):
        check_call(num_beams=4, coverage_penalty=-0.2)
    with pytest.raises(ValueError, match="it needs num_beams \\(--beams\\) > 1"):
        check_call(num_beams=1, coverage_penalty=0.2)
    model, tokenizer = load_model(folders["rnn_seq2seq"]), load_tokenizer(folders["rnn_seq2seq"])
    with pytest.raises(ValueError, match="it needs num_beams"):
        translate(model, tokenizer, SENTENCES, num_beams=1, coverage_penalty=0.2)


def test_translate_applies_the_penalty_to_a_model_and_to_an_ensemble(folders):
    model, tokenizer = load_model(folders["transformer_seq2seq"]), load_tokenizer(folders["transformer_seq2seq"])
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    expected = tokenizer.batch_decode(beam_search(model, batch, 2.0).sequences, skip_special_tokens=True)
    for decoder in (model, Seq2SeqEnsemble([model])):
        got = translate(decoder, tokenizer, SENTENCES, num_beams=4, max_new_tokens=NEW_TOKENS, coverage_penalty=2.0,
                        batch_size=len(SENTENCES))
        assert [hyps[0].text for hyps in got] == expected
