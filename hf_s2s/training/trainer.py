"""The training job's ``Seq2SeqTrainer``: :class:`CountingSeq2SeqTrainer` counts the tokens it trains on and draws its
batches in an order that a resumed run repeats (length-grouped sentences, or token budgets). The benchmark's
pipeline suite trains with it too.
"""

import logging
from functools import partial

import torch
from accelerate.data_loader import prepare_data_loader
from torch.utils.data import DataLoader
from transformers import ProgressCallback, Seq2SeqTrainer, Seq2SeqTrainingArguments
from transformers.trainer_utils import seed_worker

from ..data.encoding import sequence_lengths
from ..data.regularization import RegularizedTrainSet
from ..data.sampling import (
    DEFAULT_STREAMING_WINDOW_PAIRS,
    LengthGroupedEpochSampler,
    StreamTokenBudgetBatches,
    TokenBudgetBatchSampler,
)
from ..models.families import FAMILIES

logger = logging.getLogger(__name__)


def check_token_budget_batching(training_args: Seq2SeqTrainingArguments) -> None:
    """Token-budget batches give each process its own share of every batch: accelerate's ``split_batches`` or
    ``dispatch_batches`` (process 0 cutting batches up) would cut them again."""
    split = {name for name in ("split_batches", "dispatch_batches") if getattr(training_args.accelerator_config, name)}
    if split:
        raise ValueError(f"--max_tokens_per_batch gives each process its own share of every batch; it cannot be "
                         f"combined with --accelerator_config {sorted(split)} (process 0 cutting batches up)")


def move_loss_into_model(trainer: Seq2SeqTrainer) -> None:
    """Move the loss options into the model's config, whose forward computes the loss from the labels:

    - Trainer's label smoothing (``config.label_smoothing``, the same loss as Trainer's ``LabelSmoother``): with its
      own smoothing on, Trainer pops the labels before calling the model, which then never runs its padding-free loss
      path. The training arguments keep the factor, so what is saved and reported says it.
    - R-Drop's weight, ``--rdrop_alpha`` (``config.rdrop_alpha``; 0 leaves the loss as it was): the model repeats the
      batch itself, so the padding-free path, label smoothing and Trainer's ``num_items_in_batch`` all apply.

    Another family's model (fine-tuning a MarianMT, say) has no such fields: Trainer keeps smoothing for it, and
    ``check_arguments`` refuses R-Drop for it."""
    if trainer.model.config.model_type not in FAMILIES:
        return
    config = trainer.model.config
    config.label_smoothing = trainer.args.label_smoothing_factor
    trainer.label_smoother = None
    config.rdrop_alpha = getattr(trainer.args, "rdrop_alpha", 0.0)  # transformers' own arguments have no such field
    dropout = any(value for name, value in config.to_dict().items() if name.endswith("dropout"))
    scheduled_sampling = getattr(config, "teacher_forcing_ratio", 1.0) < 1.0  # the RNN's: random decoder inputs
    if config.rdrop_alpha and not (dropout or scheduled_sampling):
        logger.warning("--rdrop_alpha %s with no dropout in the model: both passes of each batch are the same, the KL "
                       "term is 0, and each step costs about twice as much for nothing; set a dropout in "
                       "--model_config", config.rdrop_alpha)


def close_progress_bars(trainer: Seq2SeqTrainer) -> None:
    """Close the training and evaluation progress bars (``ProgressCallback``'s) that training stopped by an exception
    leaves open, as the end of training and of an evaluation close them: an open bar holds the cursor at the end of
    its line, where the next message would be glued, and draws itself once more when it is garbage-collected."""
    for callback in trainer.callback_handler.callbacks:
        if isinstance(callback, ProgressCallback):
            callback.on_evaluate(trainer.args, trainer.state, trainer.control)  # the evaluation bar, if open
            if callback.training_bar is not None:
                callback.on_train_end(trainer.args, trainer.state, trainer.control)


class CountingSeq2SeqTrainer(Seq2SeqTrainer):
    """Seq2SeqTrainer that counts the source + target tokens (padding excluded) of the batches it trains on, so
    training speed is measured on what was trained: streamed corpora and resumed runs included.

    Its training order is a pure function of (seed, epoch) (:mod:`hf_s2s.data.sampling`), so a run resumed in any
    epoch trains on the same batches as the uninterrupted run; with ``max_tokens_per_batch`` the batches are
    token-budget batches (:class:`~hf_s2s.data.sampling.TokenBudgetBatchSampler`; of a streamed corpus,
    :class:`~hf_s2s.data.sampling.StreamTokenBudgetBatches`, ``streaming_window`` pairs at a time)."""

    def __init__(self, *args, max_tokens_per_batch: int | None = None,
                 streaming_window: int = DEFAULT_STREAMING_WINDOW_PAIRS, **kwargs):
        super().__init__(*args, **kwargs)
        if isinstance(self.train_dataset, torch.utils.data.IterableDataset) and \
                self.args.accelerator_config.dispatch_batches is None:
            # accelerate's default for a stream: process 0 reads a batch per process and concatenates them to
            # share out, which fails on batches padded to different lengths. Each process reads the stream
            # instead and keeps its share (accelerate's IterableDatasetShard, or StreamTokenBudgetBatches).
            self.accelerator.dataloader_config.dispatch_batches = False
        self.max_tokens_per_batch = max_tokens_per_batch
        self.streaming_window = streaming_window  # pairs of a stream batched together
        # counted on the batches' device and read once, by train_tokens: a read per step would stall a GPU
        self._train_tokens: torch.Tensor | int = 0
        self.epoch_sampler = None  # the sampler of the current training data loader, told the epoch

    def _sampler_seed(self) -> int:
        return self.args.data_seed if self.args.data_seed is not None else self.args.seed

    def _get_train_sampler(self, train_dataset=None):
        """``group_by_length`` as Trainer does it, but shuffled by the sampler's own per-epoch generator."""
        train_dataset = train_dataset if train_dataset is not None else self.train_dataset
        if self.args.train_sampling_strategy != "group_by_length":
            return super()._get_train_sampler(train_dataset)
        if isinstance(train_dataset, RegularizedTrainSet):
            self.epoch_sampler = LengthGroupedEpochSampler(
                train_dataset.lengths()[0], self.args.train_batch_size * self.args.gradient_accumulation_steps,
                seed=self._sampler_seed())
            return self.epoch_sampler
        if not hasattr(train_dataset, "column_names"):
            return super()._get_train_sampler(train_dataset)
        length_column = self.args.length_column_name  # Trainer's convention: a precomputed length column
        self.epoch_sampler = LengthGroupedEpochSampler(
            train_dataset[length_column][:] if length_column in train_dataset.column_names
            else sequence_lengths(train_dataset, "input_ids"),
            self.args.train_batch_size * self.args.gradient_accumulation_steps, seed=self._sampler_seed())
        return self.epoch_sampler

    def _planned_lengths(self, train_dataset) -> tuple[list[int], list[int]]:
        """Source and target lengths the batches are planned with: of the deterministic segmentation when the
        sentences are resegmented each epoch (subword regularization)."""
        if isinstance(train_dataset, RegularizedTrainSet):
            return train_dataset.lengths()
        return sequence_lengths(train_dataset, "input_ids"), sequence_lengths(train_dataset, "labels")

    def get_train_dataloader(self) -> DataLoader:
        if self.max_tokens_per_batch is None:
            return super().get_train_dataloader()
        check_token_budget_batching(self.args)
        if isinstance(self.train_dataset, torch.utils.data.IterableDataset):
            return self._stream_dataloader()
        dataset = self.train_dataset if isinstance(self.train_dataset, RegularizedTrainSet) else \
            self._remove_unused_columns(self.train_dataset, description="Training")
        self.epoch_sampler = TokenBudgetBatchSampler(
            *self._planned_lengths(dataset), self.max_tokens_per_batch, seed=self._sampler_seed(),
            num_processes=self.args.world_size, rank=self.args.process_index,
            accumulation_steps=self.args.gradient_accumulation_steps)
        args = self.args  # the data loader settings Trainer's own training loader takes
        loader = self.accelerator.prepare(DataLoader(
            dataset, batch_sampler=self.epoch_sampler, collate_fn=self.data_collator,
            num_workers=args.dataloader_num_workers, pin_memory=args.dataloader_pin_memory,
            persistent_workers=args.dataloader_persistent_workers, prefetch_factor=args.dataloader_prefetch_factor,
            multiprocessing_context=args.dataloader_multiprocessing_context, in_order=args.dataloader_in_order,
            worker_init_fn=partial(seed_worker, num_workers=args.dataloader_num_workers, rank=args.process_index)))
        # accelerate deals a batch sampler's batches out round-robin across processes (BatchSamplerShard); ours
        # yields this process's share already, so the wrapper passes everything through, as Trainer does for
        # its own rank-aware BatchRebalanceSampler.
        shard = loader.batch_sampler
        if shard is not self.epoch_sampler:
            shard.num_processes, shard.process_index = 1, 0
        return loader

    def _stream_dataloader(self) -> DataLoader:
        """Token-budget batches of a streamed training split, this process's share of each step. accelerate
        would deal an iterable's batches out from process 0 (``dispatch_batches``) or cut them up again: the
        loader is only given to it to put the batches on the device. The stream is read in this process (no
        workers: each would read all of it; the job refuses --dataloader_num_workers here)."""
        batches = StreamTokenBudgetBatches(
            self.train_dataset, self.max_tokens_per_batch, seed=self._sampler_seed(), window=self.streaming_window,
            num_processes=self.args.world_size, rank=self.args.process_index,
            accumulation_steps=self.args.gradient_accumulation_steps)
        loader = DataLoader(batches, batch_size=None, collate_fn=self.data_collator,
                            pin_memory=self.args.dataloader_pin_memory)
        return prepare_data_loader(loader, self.args.device, num_processes=1, process_index=0, put_on_device=True,
                                   dispatch_batches=False)

    def _run_epoch(self, *args, epoch: int, **kwargs):
        # Trainer's own set_epoch does not reach a sampler under accelerate's shard wrapper in the epoch a
        # multi-process run resumes in (SkipBatchSampler(BatchSamplerShard(...)) hides it): tell it directly.
        if self.epoch_sampler is not None:
            self.epoch_sampler.set_epoch(epoch)
        # the epoch's segmentations (subword regularization); set before the epoch's data loader iterator (and its
        # workers) is created
        if isinstance(self.train_dataset, RegularizedTrainSet):
            self.train_dataset.set_epoch(epoch)
        return super()._run_epoch(*args, epoch=epoch, **kwargs)

    @property
    def train_tokens(self) -> int:
        """Source + target tokens (padding excluded) this process has trained on."""
        return int(self._train_tokens)

    def all_processes_train_tokens(self) -> int:
        """Source + target tokens (padding excluded) every process together has trained on. Every process calls it."""
        # reduced on the device the count lives on (NCCL reduces no CPU tensors)
        return int(self.accelerator.reduce(torch.as_tensor(self._train_tokens, device=self.args.device),
                                           reduction="sum"))

    def training_step(self, model, inputs, num_items_in_batch=None):
        self._train_tokens = self._train_tokens + inputs["attention_mask"].sum() + (inputs["labels"] != -100).sum()
        return super().training_step(model, inputs, num_items_in_batch)

    def _issue_warnings_after_load(self, load_result):
        """Restoring a checkpoint (the best one at the end, or on resume) loads the state dict non-strictly;
        tied weights (``lm_head.weight``, the embeddings) are left out of every checkpoint by save_pretrained
        and come back through the tie, so only other missing keys are worth a warning."""
        tied = getattr(self.model, "all_tied_weights_keys", None) or {}
        missing = [key for key in load_result.missing_keys if key not in tied]
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing))


__all__ = ["CountingSeq2SeqTrainer", "check_token_budget_batching", "close_progress_bars", "move_loss_into_model"]
