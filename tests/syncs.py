"""Counting host syncs: the device-to-host reads (``.item()``, ``bool(t)``, ``torch.equal``, ``nonzero``) a model
makes, recorded on CPU with a ``TorchDispatchMode`` (tests/test_syncs.py, tests/test_length_bound.py)."""

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import MarianConfig, MarianMTModel

VOCAB, PAD, EOS, START = 40, 0, 2, 1
# The aten operators that read a tensor's values back to the host.
SYNC_OPS = {"_local_scalar_dense", "nonzero", "equal", "is_nonzero", "item"}


class CountSyncs(TorchDispatchMode):
    """Counts the device-to-host reads made while active, by operator name."""

    def __init__(self):
        super().__init__()
        self.counts = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::")[-1]
        if name in SYNC_OPS:
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def padded_batch():
    """A right-padded source batch and labels with -100 padding, as the collator gives them."""
    torch.manual_seed(0)
    input_ids = torch.randint(4, VOCAB, (4, 7))
    input_ids[1, 5:] = PAD
    input_ids[2, 3:] = PAD
    labels = torch.randint(4, VOCAB, (4, 6))
    labels[0, 4:] = -100
    labels[3, 2:] = -100
    return {"input_ids": input_ids, "attention_mask": (input_ids != PAD).long(), "labels": labels}


def marian():
    config = MarianConfig(
        vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=START, forced_eos_token_id=None,
    )
    return MarianMTModel(config)


def training_step_syncs(model) -> CountSyncs:
    """Forward with labels (num_items_in_batch as Trainer passes it), backward and an optimizer step."""
    batch = padded_batch()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model.train()
    with CountSyncs() as counter:
        loss = model(**batch, num_items_in_batch=(batch["labels"] != -100).sum()).loss
        loss.backward()
        optimizer.step()
    return counter


def greedy_decode_syncs(model, steps: int = 10, with_mask: bool = True, **kwargs) -> CountSyncs:
    """``steps`` greedy steps (no early stop: min_new_tokens); ``kwargs`` go to generate(). ``with_mask=False``
    passes no attention_mask (the model infers it from the pad id)."""
    batch = padded_batch()
    model.eval()
    mask = batch["attention_mask"] if with_mask else None
    with CountSyncs() as counter:
        sequences = model.generate(input_ids=batch["input_ids"], attention_mask=mask,
                                   max_new_tokens=steps, min_new_tokens=steps, num_beams=1, do_sample=False, **kwargs)
    assert sequences.shape[1] == steps + 1
    return counter
