"""Pieces shared by the hf_s2s modeling files: the label shift, the token-sum loss and input checks.

Copied beside the modeling files into every saved model folder (``save_pretrained`` follows single-dot
relative imports), so it must import nothing from hf_s2s.
"""

import torch
import torch.nn.functional as F


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Teacher forcing inputs from labels: prepend the start token, drop the last label, -100 -> pad.

    labels: (batch, tgt_len) -> (batch, tgt_len)
    """
    shifted = labels.new_empty(labels.shape)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


def seq2seq_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    num_items_in_batch: int | torch.Tensor | None = None,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Token-level cross-entropy over positions whose label is not -100.

    logits: (batch, tgt_len, vocab); labels: (batch, tgt_len). With ``num_items_in_batch`` (what Trainer
    passes: the number of label tokens in the whole accumulated, all-process batch) the summed loss is divided
    by it, so gradient accumulation and several processes give the same gradient as one big batch; without it,
    the mean over this batch's label tokens.
    """
    loss = F.cross_entropy(
        logits.float().reshape(-1, logits.size(-1)),
        labels.reshape(-1).to(logits.device),
        ignore_index=-100,
        reduction="sum",
        label_smoothing=label_smoothing,
    )
    if num_items_in_batch is None:
        num_items_in_batch = (labels != -100).sum()
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss / num_items_in_batch


def is_capturing_graph() -> bool:
    """True while torch.compile, torch.export (and so the dynamo ONNX exporter) or torch.jit tracing (the
    TorchScript ONNX exporter) captures the model. Code that reads tensor values back into a Python branch must not
    run then: it is a graph break under compile, an error under export, and a branch baked into a trace."""
    return torch.compiler.is_compiling() or torch.compiler.is_exporting() or torch.jit.is_tracing()


def check_token_ids(input_ids: torch.Tensor | None, vocab_size: int, name: str) -> None:
    """Raise a clear error for ids outside [0, vocab_size) instead of a bare index error from the embedding."""
    if input_ids is None or is_capturing_graph():
        return  # reading the values back is a data-dependent branch
    if input_ids.numel() == 0:
        return
    low, high = int(input_ids.min()), int(input_ids.max())
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(
            f"`{name}` holds token id {bad}, outside the model's vocabulary [0, {vocab_size}); "
            "check that the tokenizer matches the model (vocab_size in its config)"
        )


# Length limit both families ship in their generation config (generate()'s generic default, 20 tokens, cuts
# sentences): 128 decoder positions, the start token included.
DEFAULT_GENERATION_MAX_LENGTH = 128


class GenerationLengthDefault:
    """Mixed into both generation models (before ``GenerationMixin``): a new model's generation config carries
    ``max_length=DEFAULT_GENERATION_MAX_LENGTH``, and a length the user passes replaces it without a warning.

    transformers treats a ``max_length`` in the model's generation config as set by the user, so
    ``generate(max_new_tokens=n)`` would warn on every call that both are set; here the shipped ``max_length``
    is dropped when the call gives ``max_new_tokens`` and no ``max_length`` of its own.
    """

    def _set_default_generation_length(self) -> None:
        """Call at the end of ``__init__`` (a loaded generation_config.json replaces it afterwards)."""
        if self.generation_config.max_length in (None, 20):  # unset, or transformers' generic default
            self.generation_config.max_length = DEFAULT_GENERATION_MAX_LENGTH

    def _prepare_generation_config(self, generation_config, **kwargs):
        user_max_length = kwargs.get("max_length")
        if user_max_length is None and generation_config is not None:
            user_max_length = generation_config.max_length
        generation_config, model_kwargs = super()._prepare_generation_config(generation_config, **kwargs)
        if generation_config.max_new_tokens is not None and user_max_length is None:
            generation_config.max_length = None  # the call's max_new_tokens decides the length
        return generation_config, model_kwargs
