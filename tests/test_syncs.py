"""No host syncs on the hot path (issue 13): a training step and a 10-step greedy decode of each family read values
back from the device no more often than transformers' MarianMT does for the same work.

On a GPU every such read (``.item()``, ``bool(t)``, ``torch.equal``, ``nonzero``) stalls the stream. They are
counted here on CPU with a ``TorchDispatchMode`` that records the aten operators behind them. Not visible to it:
a device-to-host copy (``.cpu()``); the RNN encoder makes one per source batch, the lengths that
``pack_padded_sequence`` needs on the host (and the right-padding check reads that host copy).
"""

from collections import Counter

import pytest
import torch

from tests.helpers import random_tiny_model
from tests.syncs import (
    EOS,
    PAD,
    START,
    VOCAB,
    CountSyncs,
    greedy_decode_syncs,
    marian,
    padded_batch,
    training_step_syncs,
)


@pytest.fixture(scope="module")
def marian_counts():
    model = marian()
    return training_step_syncs(model).total, greedy_decode_syncs(model).total


@pytest.mark.parametrize("model_type", ["transformer_seq2seq", "rnn_seq2seq"])
def test_training_step_syncs_no_more_and_greedy_decode_fewer_than_marian(model_type, marian_counts):
    marian_train, marian_decode = marian_counts
    model = random_tiny_model(model_type, VOCAB, pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=START)
    model.generation_config.max_length = None
    # the source-relative length bound reads once per generate() call, not per step (tests/test_length_bound.py)
    train, decode = training_step_syncs(model), greedy_decode_syncs(model, max_len_a=None, max_len_b=None)
    assert train.total <= marian_train, f"training step: {dict(train.counts)} against MarianMT's {marian_train}"
    # fewer than Marian: a cached decoding step builds no all-ones target mask, so transformers' mask builder never
    # reads it back to check for padding (34 reads for 10 steps before, Marian's count)
    assert decode.total < marian_decode, f"10 greedy steps: {dict(decode.counts)} against MarianMT's {marian_decode}"


@pytest.mark.parametrize("model_type", ["transformer_seq2seq", "rnn_seq2seq"])
def test_an_rdrop_training_step_reads_back_as_often_as_a_plain_one(model_type):
    """R-Drop (the batch repeated, the KL term over label tokens) adds no device-to-host read to a training step."""
    counts = {rdrop_alpha: training_step_syncs(random_tiny_model(
        model_type, VOCAB, pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=START, dropout=0.1,
        rdrop_alpha=rdrop_alpha)) for rdrop_alpha in (0.0, 5.0)}
    assert counts[5.0].total == counts[0.0].total, {alpha: dict(c.counts) for alpha, c in counts.items()}


@pytest.mark.parametrize("model_type", ["transformer_seq2seq", "rnn_seq2seq"])
def test_a_mask_inferred_from_the_pad_id_reads_no_more_than_a_given_one(model_type):
    """Without attention_mask the models compare input_ids with the pad id on the device: decoding makes the reads it
    makes with the mask, no more."""
    model = random_tiny_model(model_type, VOCAB, pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=START)
    given, inferred = (greedy_decode_syncs(model, with_mask=with_mask, max_len_a=None, max_len_b=None)
                       for with_mask in (True, False))
    assert inferred.counts == given.counts


def test_an_unpadded_source_is_checked_for_padding_once():
    """The encoder-decoder's forward finds the source padding once for the encoder and the cross-attention: a batch
    without padding costs one host read (the packing's nonzero), not a second one in the encoder."""
    model = random_tiny_model("transformer_seq2seq", VOCAB, pad_token_id=PAD, eos_token_id=EOS,
                              decoder_start_token_id=START).eval()
    input_ids = torch.tensor([[5, 6, 7, EOS], [8, 9, 10, EOS]])
    decoder_input_ids = torch.tensor([[START, 5], [START, 8]])
    for attention_mask in (torch.ones_like(input_ids), None):
        with CountSyncs() as counter, torch.no_grad():
            model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids)
        assert counter.counts["nonzero"] == 1, (attention_mask is None, counter.counts)


def test_the_counter_sees_syncs():
    """The counter has teeth: the reads the old forward made are counted."""
    ids = padded_batch()["input_ids"]
    with CountSyncs() as counter:
        int(ids.max())
        torch.equal(ids, ids)
        ids.nonzero()
    assert counter.counts == Counter({"_local_scalar_dense": 1, "equal": 1, "nonzero": 1})


def test_the_training_jobs_trainer_adds_no_syncs_to_a_step(tmp_path):
    """The job's trainer counts trained tokens on the device and reads the count once, when asked: its training
    step makes exactly the reads of Seq2SeqTrainer's own step on the same batch."""
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments

    from hf_s2s.training.trainer import CountingSeq2SeqTrainer

    args = Seq2SeqTrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[], learning_rate=0.01)
    counts = {}
    for trainer_class in (Seq2SeqTrainer, CountingSeq2SeqTrainer):
        torch.manual_seed(0)
        trainer = trainer_class(model=random_tiny_model("transformer_seq2seq", vocab_size=VOCAB), args=args)
        trainer.create_optimizer_and_scheduler(num_training_steps=1)
        batch = padded_batch()
        with CountSyncs() as counter:
            trainer.training_step(trainer.model, batch, num_items_in_batch=(batch["labels"] != -100).sum())
        counts[trainer_class.__name__] = counter.total
    assert counts["CountingSeq2SeqTrainer"] == counts["Seq2SeqTrainer"], counts
    assert trainer.train_tokens == int(batch["attention_mask"].sum() + (batch["labels"] != -100).sum())
