"""The training samplers of hf_s2s.data.sampling: orders that depend on (seed, epoch) only, and token-budget batches
that cover the corpus once per epoch, shard across processes, and build the same global batches whatever the
number of processes. Lengths come from the real tokenizer on the synthetic reversal corpus."""

import json
import random

import pytest
import torch
from safetensors.torch import load_file
from transformers.trainer_pt_utils import get_length_grouped_indices

from hf_s2s.data import corpus as data_lib
from hf_s2s.data import tokenization
from hf_s2s.data.encoding import tokenize_corpus
from hf_s2s.data.sampling import (
    LengthGroupedEpochSampler,
    StreamTokenBudgetBatches,
    TokenBudgetBatchSampler,
    epoch_generator,
    padded_tokens,
    split_balanced,
)
from hf_s2s.training.run import run
from tests.helpers import TINY
from tests.runs import tiny_args


@pytest.fixture(scope="module")
def lengths():
    """Source and target token counts of 512 tokenized synthetic pairs."""
    corpus = data_lib.load_translation_corpus("synthetic:reversal", source_lang="src", target_lang="tgt")
    train = corpus["train"].select(range(512))
    tokenizer = tokenization.train_tokenizer(train, source_lang="src", target_lang="tgt", vocab_size=280)
    tokenized = tokenize_corpus({"train": train}, tokenizer, source_lang="src", target_lang="tgt",
                                max_source_length=128, max_target_length=128)["train"]
    return [len(x) for x in tokenized["input_ids"]], [len(x) for x in tokenized["labels"]]


def epoch_batches(sampler, epoch):
    sampler.set_epoch(epoch)
    return list(sampler)


def test_length_grouped_order_depends_on_seed_and_epoch_only(lengths):
    source, _ = lengths
    sampler = LengthGroupedEpochSampler(source, batch_size=32, seed=7)
    torch.manual_seed(0)
    first = epoch_batches(sampler, 1)
    torch.manual_seed(1)  # another global random state (what dropout leaves behind) changes nothing
    torch.rand(100)
    assert epoch_batches(sampler, 1) == first
    assert sorted(first) == list(range(len(source)))
    assert epoch_batches(sampler, 2) != first
    # ...and it is Trainer's own group_by_length order, drawn from the epoch's generator.
    assert first == get_length_grouped_indices(source, 32, generator=epoch_generator(7, 1))


@pytest.mark.parametrize("num_processes,accumulation_steps", [(1, 1), (2, 1), (3, 2)])
def test_token_budget_epoch_covers_every_pair_once_with_equal_steps_per_process(lengths, num_processes,
                                                                                 accumulation_steps):
    source, target = lengths
    samplers = [TokenBudgetBatchSampler(source, target, 150, seed=3, num_processes=num_processes, rank=rank,
                                        accumulation_steps=accumulation_steps) for rank in range(num_processes)]
    per_process = [epoch_batches(sampler, 0) for sampler in samplers]
    assert len({len(batches) for batches in per_process}) == 1  # the same number of steps everywhere
    assert all(len(batches) == len(sampler) for batches, sampler in zip(per_process, samplers, strict=True))
    seen = [i for batches in per_process for batch in batches for i in batch]
    assert sorted(seen) == list(range(len(source)))  # each pair exactly once: nothing dropped or repeated
    assert all(batch for batches in per_process for batch in batches)


def test_token_budget_global_batches_are_the_same_for_any_number_of_processes(lengths):
    """The step-by-step union of the processes' batches is the batch one process makes with the summed budget:
    the property that makes a 2-process run train like 1 process."""
    source, target = lengths
    one = epoch_batches(TokenBudgetBatchSampler(source, target, 400, seed=5), 3)
    two = [epoch_batches(TokenBudgetBatchSampler(source, target, 200, seed=5, num_processes=2, rank=rank), 3)
           for rank in range(2)]
    assert [sorted(a + b) for a, b in zip(*two, strict=True)] == [sorted(batch) for batch in one]
    assert all(not set(a) & set(b) for a, b in zip(*two, strict=True))


def test_token_budget_batches_fill_the_budget_from_length_buckets(lengths):
    source, target = lengths
    sampler = TokenBudgetBatchSampler(source, target, 300, seed=0)
    batches = epoch_batches(sampler, 0)
    costs = [padded_tokens(batch, source, target) for batch in batches]
    assert max(costs) <= 300
    # filled: every batch but the last of the length order would overflow with one more pair of its length
    assert sum(costs) / len(costs) > 0.9 * 300
    # length buckets: the source lengths of a batch span less than the corpus does
    spans = [max(source[i] for i in batch) - min(source[i] for i in batch) for batch in batches]
    assert max(spans) < (max(source) - min(source)) / 2
    padding = 1 - sum(source[i] + target[i] for batch in batches for i in batch) / sum(costs)
    assert padding < 0.1


def test_token_budget_order_is_deterministic_and_differs_per_epoch(lengths):
    source, target = lengths
    make = lambda seed: TokenBudgetBatchSampler(source, target, 300, seed=seed)  # noqa: E731
    assert epoch_batches(make(1), 4) == epoch_batches(make(1), 4)
    assert epoch_batches(make(1), 4) != epoch_batches(make(1), 5)
    assert epoch_batches(make(1), 4) != epoch_batches(make(2), 4)


def test_split_balanced_gives_disjoint_pieces_of_similar_cost():
    rng = random.Random(0)
    source = sorted(rng.randint(3, 40) for _ in range(60))
    target = [rng.randint(3, 40) for _ in range(60)]
    batch = list(range(60))
    pieces = split_balanced(batch, source, target, 4)
    assert len(pieces) == 4 and [i for piece in pieces for i in piece] == batch
    costs = [padded_tokens(piece, source, target) for piece in pieces]
    assert max(costs) <= padded_tokens(batch, source, target) / 4 + max(s + t for s, t in zip(source, target, strict=True))
    assert split_balanced([0, 1], source, target, 2) == [[0], [1]]


def test_token_budget_refuses_pairs_longer_than_the_budget_and_too_few_pairs():
    with pytest.raises(ValueError, match=r"--max_tokens_per_batch 20 .* pair 1 \(15 source \+ 9 target tokens\).*24"):
        TokenBudgetBatchSampler([3, 15, 4], [3, 9, 4], 20, seed=0)
    with pytest.raises(ValueError, match="3 training pairs cannot fill one batch on each of 2 process"):
        TokenBudgetBatchSampler([3, 3, 4], [3, 3, 4], 20, seed=0, num_processes=2, accumulation_steps=2)


# --- token budgets on a stream
# ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rows(lengths):
    """The 512 tokenized pairs as a stream yields them, each tagged with its position (``pair``)."""
    source, target = lengths
    return [{"input_ids": [5] * s, "attention_mask": [1] * s, "labels": [6] * t, "pair": i}
            for i, (s, t) in enumerate(zip(source, target, strict=True))]


class CountedStream:
    """A re-iterable stream that counts the rows handed out, so a test can see how far ahead it was read."""

    def __init__(self, rows):
        self.rows, self.read = rows, 0

    def __iter__(self):
        for row in self.rows:
            self.read += 1
            yield row


def stream_pass(rows, pass_number=0, **kwargs):
    """The micro-batches of one pass, per process (rank), as lists of pair positions."""
    num_processes = kwargs.pop("num_processes", 1)
    return [[[row["pair"] for row in batch] for batch in StreamTokenBudgetBatches(
        rows, num_processes=num_processes, rank=rank, **kwargs).one_pass(pass_number)]
        for rank in range(num_processes)]


@pytest.mark.parametrize("num_processes,accumulation_steps,window", [(1, 1, 100), (2, 1, 100), (3, 2, 64),
                                                                      (2, 2, 511), (1, 1, 1000)])
def test_stream_budget_pass_holds_every_pair_once_with_equal_steps_per_process(rows, num_processes,
                                                                              accumulation_steps, window):
    per_process = stream_pass(rows, max_tokens=150, seed=3, window=window, num_processes=num_processes,
                              accumulation_steps=accumulation_steps)
    assert len({len(batches) for batches in per_process}) == 1  # the same number of steps everywhere
    seen = [i for batches in per_process for batch in batches for i in batch]
    assert sorted(seen) == list(range(len(rows)))  # nothing dropped (512 = 5 x 100 + a tail of 12), nothing twice
    assert all(batch for batches in per_process for batch in batches)


def test_stream_budget_batches_stay_within_the_budget_and_the_window(rows, lengths):
    source, target = lengths
    stream = CountedStream(rows)
    batches = StreamTokenBudgetBatches(stream, max_tokens=300, seed=0, window=100)
    served = 0
    for batch in batches.one_pass(0):
        served += len(batch)
        assert padded_tokens([row["pair"] for row in batch], source, target) <= 300
        assert stream.read - served <= 100 + 1  # pairs held: the window and the one read ahead
    assert served == len(rows)
    # filled from length buckets, as in memory: little padding
    costs = sum(padded_tokens([row["pair"] for row in batch], source, target) for batch in batches.one_pass(0))
    assert 1 - sum(source) / costs - sum(target) / costs < 0.1


def test_stream_budget_batches_are_reproducible_and_differ_per_pass_and_seed(rows):
    make = lambda seed, pass_number=0: stream_pass(rows, pass_number, max_tokens=300, seed=seed, window=100)  # noqa
    assert make(1) == make(1)
    assert make(1) != make(1, pass_number=1) and make(1) != make(2)
    endless = iter(StreamTokenBudgetBatches(rows, max_tokens=300, seed=1, window=100))  # pass after pass
    first_two = [[row["pair"] for row in next(endless)] for _ in range(len(make(1)[0]) + len(make(1, 1)[0]))]
    assert first_two == make(1)[0] + make(1, 1)[0]


def test_stream_budget_global_batches_are_the_same_for_any_number_of_processes(rows):
    """Step by step the union of the processes' pieces is the batch one process makes with the summed budget,
    where no window ends in a batch of fewer pairs than pieces (true of windows of 128 here: its smallest
    batch holds 2)."""
    one = stream_pass(rows, max_tokens=400, seed=5, window=128)[0]
    two = stream_pass(rows, max_tokens=200, seed=5, window=128, num_processes=2)
    assert min(len(batch) for batch in one) >= 2
    assert [sorted(a + b) for a, b in zip(*two, strict=True)] == [sorted(batch) for batch in one]


def test_stream_budget_refuses_a_pair_longer_than_the_budget_and_too_short_a_stream(rows):
    long = [*rows[:5], {"input_ids": [5] * 30, "attention_mask": [1] * 30, "labels": [6] * 20, "pair": 5}]
    with pytest.raises(ValueError, match=r"--max_tokens_per_batch 40 is smaller than 1 pair\(s\) of the training "
                                         r"stream alone, e.g. pair 105 \(30 source \+ 20 target tokens\)"):
        list(StreamTokenBudgetBatches(rows[:100] + long, max_tokens=40, seed=0, window=100).one_pass(0))
    with pytest.raises(ValueError, match=r"the training stream holds 1 pair\(s\), too few .* 2 process"):
        list(StreamTokenBudgetBatches(rows[:1], max_tokens=400, seed=0, window=100, num_processes=2).one_pass(0))


@pytest.mark.parametrize("flags,message", [
    (("--max_tokens_per_batch", "0"), "--max_tokens_per_batch must be a positive number of tokens, got 0"),
    # a stream is not read ahead: the length limits (truncation, or the filter that drops) must fit the budget
    (("--max_tokens_per_batch", "200", "--streaming", "true", "--max_steps", "2"),
     r"--max_tokens_per_batch 200 on a stream must hold the longest pair the length limits let through, 128 "
     r"\(--max_source_length\) \+ 128 \(--max_target_length\) tokens"),
    (("--max_tokens_per_batch", "200", "--streaming", "true", "--max_steps", "2", "--max_source_length", "150",
      "--filter_max_source_tokens", "120", "--max_target_length", "90"),
     r"120 \(--filter_max_source_tokens\) \+ 90 \(--max_target_length\) tokens"),
    (("--streaming_window_pairs", "100"), "--streaming_window_pairs 100 .* needs --streaming and --max_tokens_per_batch"),
    (("--streaming", "true", "--max_steps", "2", "--max_tokens_per_batch", "400", "--streaming_window_pairs", "0"),
     "--streaming_window_pairs must be a positive number of pairs, got 0"),
    (("--streaming", "true", "--max_steps", "2", "--max_tokens_per_batch", "400", "--dataloader_num_workers", "2"),
     "--dataloader_num_workers must be 0 .* got 2"),
    (("--max_tokens_per_batch", "10"), r"--max_tokens_per_batch 10 is smaller than \d+ training pair"),
    (("--max_tokens_per_batch", "400", "--accelerator_config", '{"dispatch_batches": true}'),
     r"cannot be combined with --accelerator_config \['dispatch_batches'\]"),
])
def test_training_job_refuses_a_bad_token_budget_before_training(tmp_path, flags, message):
    with pytest.raises(ValueError, match=message):
        run(*tiny_args(tmp_path, "transformer_seq2seq", *flags))
    assert not list(tmp_path.glob("checkpoint-*"))


def test_padded_tokens_counts_each_side_padded_to_its_longest():
    # sources of 2 and 4 tokens, targets of 3 and 5: 2 sentences x (4 + 5) positions
    assert padded_tokens([0, 1], [2, 4, 9], [3, 5, 9]) == 18
    assert padded_tokens([], [2], [3]) == 0


@pytest.mark.slow
@pytest.mark.parametrize("loss", [(), ("--rdrop_alpha", "5")], ids=["plain", "rdrop"])
def test_token_budget_with_accumulation_trains_like_the_summed_budget_in_one_step(tmp_path, loss):
    """2 accumulated micro-batches of 200 tokens are the pieces of the global batch of 400 tokens; with the loss
    normalised over the whole step (num_items_in_batch) the run ends with the weights of 1 x 400. Without dropout
    (so that the pieces compute what the whole batch computes) R-Drop's two passes are the same and its KL term is
    0: what this checks of R-Drop is its repeated batch and the normalisation of its cross-entropy; the KL term's
    is checked with two different passes in test_modeling_common."""
    common = (*loss, "--max_steps", "4", "--eval_strategy", "no", "--save_strategy", "no", "--load_best_model_at_end",
              "false", "--test_num_beams", "1", "--model_config", json.dumps({**TINY["transformer_seq2seq"],
                                                                              "dropout": 0.0}))
    accumulated = run(*tiny_args(tmp_path / "accumulated", "transformer_seq2seq", *common,
                                 "--max_tokens_per_batch", "200", "--gradient_accumulation_steps", "2"))
    whole = run(*tiny_args(tmp_path / "whole", "transformer_seq2seq", *common, "--max_tokens_per_batch", "400"))
    assert accumulated["train_tokens"] == whole["train_tokens"] and whole["max_tokens_per_batch"] == 400
    weights_accumulated = load_file(tmp_path / "accumulated" / "model" / "model.safetensors")
    weights_whole = load_file(tmp_path / "whole" / "model" / "model.safetensors")
    for key in weights_whole:  # the same sums in another order: float rounding only
        torch.testing.assert_close(weights_accumulated[key], weights_whole[key], rtol=0, atol=1e-5, msg=key)
