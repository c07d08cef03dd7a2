"""The "translation" and "text2text-generation" pipelines for encoder-decoder models.

transformers 5 removed both tasks from ``pipeline()``, but a model folder can still ship its own pipeline: the
Hub folder built by ``hf_s2s.hub.publish`` copies this file and names its classes in config.json's
``custom_pipelines``, so ``pipeline("translation", model=folder, trust_remote_code=True)`` works where hf_s2s is
not installed. Copied into model folders: imports only transformers and torch, never hf_s2s.
"""

import torch
from transformers import Pipeline

from .transformers_compat import pipeline_generate_kwargs


class Seq2SeqTranslationPipeline(Pipeline):
    """Text in, generated text out: tokenize the source, ``model.generate``, decode. Batched calls
    (``batch_size=N``) pad on the right (the RNN family needs it) and give the same output as single calls.
    Generation parameters (``num_beams``, ``max_new_tokens``, ``num_return_sequences``, ...) pass through to
    ``generate``; ``max_source_length`` truncates the source. ``truncation`` is the tokenizer's, as in transformers
    4's TranslationPipeline (which ``evaluate``'s translation evaluator passes ``truncation=True``): True cuts the
    source to ``max_source_length``, else to the tokenizer's ``model_max_length``; ``max_length`` stays a
    generation parameter there and here."""

    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_video_processor = False
    _load_feature_extractor = False
    _pipeline_calls_generate = True
    output_key = "translation_text"

    def _sanitize_parameters(self, max_source_length=None, truncation=None, clean_up_tokenization_spaces=None,
                             **generate_kwargs):
        if max_source_length is not None and truncation in (False, "do_not_truncate"):
            raise ValueError(f"max_source_length={max_source_length} cuts the source, truncation={truncation!r} says "
                             "not to: give one of them")
        preprocess_params = {"max_source_length": max_source_length} if max_source_length is not None else {}
        if truncation is not None:
            preprocess_params["truncation"] = truncation
        postprocess_params = {}
        if clean_up_tokenization_spaces is not None:
            postprocess_params["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
        return preprocess_params, generate_kwargs, postprocess_params

    def __call__(self, inputs, **kwargs):
        """inputs: one string or a list of strings. One string gives a list of ``{output_key: text}``, one per
        returned sequence. A list gives one such list per input, or, with one sequence per input, the dicts
        themselves (the layout of the transformers 4 pipelines)."""
        result = super().__call__(inputs, **kwargs)
        if isinstance(inputs, list) and all(len(r) == 1 for r in result):
            return [r[0] for r in result]
        return result

    def preprocess(self, text: str, max_source_length: int | None = None, truncation=None) -> dict[str, torch.Tensor]:
        """``truncation`` None: cut the source only to a given ``max_source_length``."""
        if not isinstance(text, str):
            raise TypeError(f"{type(self).__name__} takes a string or a list of strings, got {type(text).__name__}")
        if truncation is None:
            truncation = max_source_length is not None
        return self.tokenizer(text, return_tensors="pt", truncation=truncation, max_length=max_source_length)

    def _forward(self, model_inputs: dict[str, torch.Tensor], **generate_kwargs) -> dict[str, torch.Tensor]:
        batch_size = model_inputs["input_ids"].shape[0]
        generate_kwargs = pipeline_generate_kwargs(self, generate_kwargs)
        output_ids = self.model.generate(**model_inputs, **generate_kwargs)  # (B * n, T_out)
        return {"output_ids": output_ids.reshape(batch_size, -1, output_ids.shape[-1])}  # (B, n, T_out)

    def postprocess(self, model_outputs: dict[str, torch.Tensor], clean_up_tokenization_spaces: bool | None = None):
        texts = self.tokenizer.batch_decode(
            model_outputs["output_ids"][0], skip_special_tokens=True,
            clean_up_tokenization_spaces=clean_up_tokenization_spaces,
        )
        return [{self.output_key: text} for text in texts]


class Seq2SeqText2TextPipeline(Seq2SeqTranslationPipeline):
    """The same pipeline under the "text2text-generation" task, returning ``generated_text``."""

    output_key = "generated_text"


__all__ = ["Seq2SeqTranslationPipeline", "Seq2SeqText2TextPipeline"]
