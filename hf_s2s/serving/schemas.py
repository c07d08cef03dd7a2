"""The bodies of the service's requests and answers, as the OpenAPI page (``/docs``) shows them.

Requests are validated strictly: a field of the wrong type (a number for a sentence, ``true`` for a beam count, a
string for a number) and a field the service does not know (a misspelled option) are refused with 422, never
converted or ignored."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

_STRICT = ConfigDict(strict=True, extra="forbid", protected_namespaces=())


class AttentionView(BaseModel):
    """One attention map of a translation: what the attention explorer shows, and all it asks for."""

    model_config = _STRICT

    kind: Literal["cross", "encoder"] = Field("cross", description="cross: the decoder's attention over the source "
                                                                   "(a row per target token); encoder: the "
                                                                   "Transformer encoder's self-attention")
    layer: int | None = Field(None, description="the layer, from 0; default: the last")
    head: int | None = Field(None, description="the head, from 0; default: the mean of the heads")
    word_level: bool = Field(False, description="merge subword pieces into words: a source word's pieces summed, a "
                                                "target word's pieces averaged")


class TranslateRequest(BaseModel):
    """Sentences to translate and how; an option left out takes the model's generation config (as
    ``hf-s2s translate`` does)."""

    model_config = _STRICT

    sentences: list[str] = Field(description="the source sentences, one string each; a blank one gives a blank "
                                             "translation")
    model: str | None = Field(None, description="the served model's name (GET /models); default: the first served")
    num_beams: int | None = Field(None, description="beam size, 1 for greedy search; default: the model's "
                                                    "generation config")
    num_return_sequences: int = Field(1, description="hypotheses returned per sentence, best first (n-best; at most "
                                                     "num_beams)")
    scores: bool = Field(False, description="return each hypothesis' score (greedy: the sum of its token "
                                            "log-probabilities; beam: the length-normalized beam score)")
    alignment: bool = Field(False, description="return the best translation's alignment: the last decoder layer's "
                                               "cross-attention, averaged over heads (torch engine, attention models; "
                                               "none for a blank sentence, which is not decoded)")
    output_attentions: bool = Field(False, description="return, with the alignment, every layer's and head's "
                                                       "attention weights of the best translation: the decoder's "
                                                       "cross-attention and, for the Transformer, the encoder's "
                                                       "self-attention (torch engine, attention models)")
    attention: AttentionView | None = Field(
        None, description="return, for each returned hypothesis (the n-best list's too), its tokens, their "
                          "log-probabilities and the one attention map of this view, read under teacher forcing: "
                          "rows x columns numbers per hypothesis where output_attentions returns every layer's and "
                          "head's (torch engine, attention models; none for a blank sentence)")
    max_len_a: float | None = Field(None, description="length bound max_len_a x source tokens + max_len_b per "
                                                      "output; default: the model's generation config")
    max_len_b: int | None = Field(None, description="tokens added to the length bound; default: the model's "
                                                    "generation config")
    no_length_bound: bool = Field(False, description="decode without the source-relative length bound")
    glossary: list[list[str]] | None = Field(
        None, description="terminology: [source term, target term] pairs; each sentence's translation holds the target "
                          "term of every source term it holds (whole words, any case; see hf-s2s translate "
                          "--glossary). Torch engine only")
    shortlist: bool = Field(False, description="decode over the served folder's vocabulary shortlist "
                                               "(shortlist.safetensors, hf-s2s build-shortlist). Torch engine only")


class AttentionMap(BaseModel):
    kind: str = Field(description="cross or encoder")
    layer: int = Field(description="the layer shown, from 0")
    head: int | None = Field(description="the head shown, from 0; null: the mean of the heads")
    layers: int = Field(description="the layers of this kind of attention")
    heads: int = Field(description="the heads of each layer")
    word_level: bool
    rows: list[str] = Field(description="a label per row: the target tokens (cross) or source tokens (encoder), or "
                                        "their words")
    columns: list[str] = Field(description="a label per column: the source tokens, or words")
    row_special: list[bool] = Field(description="which rows are special tokens (</s>)")
    column_special: list[bool] = Field(description="which columns are special tokens (</s>)")
    weights: list[list[float]] = Field(description="(rows, columns): the attention each row paid to each column; "
                                                   "each row sums to 1")
    row_log_probs: list[float] | None = Field(None, description="cross: each row's log-probability (natural log; a "
                                                                "word's: its pieces' summed)")


class Hypothesis(BaseModel):
    text: str
    score: float | None = Field(None, description="present when the request asked for scores")
    tokens: list[str] | None = Field(None, description="with attention: the target tokens, </s> included")
    token_log_probs: list[float] | None = Field(None, description="with attention: each token's log-probability "
                                                                  "(natural log)")
    attention: AttentionMap | None = Field(None, description="with attention: the map asked for")


class Alignment(BaseModel):
    source_tokens: list[str]
    target_tokens: list[str]
    weights: list[list[float]] = Field(description="(target tokens, source tokens): the attention each target "
                                                   "token paid to each source token")
    cross_attentions: list[list[list[list[float]]]] | None = Field(
        None, description="with output_attentions: (decoder layers, heads, target tokens, source tokens), the "
                          "decoder's attention over the source (an RNN: one layer, its attention mechanism)")
    encoder_attentions: list[list[list[list[float]]]] | None = Field(
        None, description="with output_attentions, for the Transformer: (encoder layers, heads, source tokens, "
                          "source tokens), row i what source token i attended to")


class Translation(Hypothesis):
    text: str = Field(description="the best translation")
    score: float | None = Field(None, description="its score, when asked for")
    hypotheses: list[Hypothesis] | None = Field(None, description="the n-best list, best first, when "
                                                                  "num_return_sequences > 1")
    alignment: Alignment | None = None


class Search(BaseModel):
    """The search the translations come from, which says what their scores are."""

    num_beams: int
    num_return_sequences: int
    length_penalty: float
    # the source-relative length bound (max_len_a x source tokens + max_len_b); absent from an answer without one
    max_len_a: float | None = None
    max_len_b: int | None = None
    max_new_tokens: int
    score: str = Field(description="what a score is: the sum of the token log-probabilities (greedy search), or that "
                                   "sum divided by length ** length_penalty (beam search)")


class TranslateResponse(BaseModel):
    model: str = Field(description="the model that translated")
    engine: str | None = Field(None, description="with scores: the engine and its weights (torch float32, ...)")
    search: Search | None = Field(None, description="with scores: the search that made the translations")
    translations: list[Translation] = Field(description="one per sentence, in the request's order")


class ScoreRequest(BaseModel):
    """Given translations of the sources, read by the model under teacher forcing (forced decoding)."""

    model_config = _STRICT

    sentences: list[str] = Field(description="the source sentences")
    targets: list[str] | None = Field(None, description="a translation of each sentence, as text (tokenized by the "
                                                        "model's target tokenizer, </s> appended)")
    target_tokens: list[list[str]] | None = Field(
        None, description="instead of targets: each translation as target tokens (a hypothesis' tokens, exactly)")
    model: str | None = Field(None, description="the served model's name (GET /models); default: the first served")
    attention: AttentionView | None = Field(None, description="return this attention map of each pair too")


class Scored(BaseModel):
    source_tokens: list[str]
    target_tokens: list[str] = Field(description="the translation's tokens, </s> included")
    token_log_probs: list[float] = Field(description="each target token's log-probability given the source and the "
                                                     "tokens before it (natural log)")
    score: float = Field(description="the translation's log-probability: the sum of token_log_probs")
    attention: AttentionMap | None = None


class ScoreResponse(BaseModel):
    model: str
    scores: list[Scored] = Field(description="one per sentence, in the request's order")


class ModelInfo(BaseModel):
    name: str
    default: bool = Field(description="whether requests without a model name go to it")
    folder: str = Field(description="the model's folder as the server was started with it (an absolute path: its last "
                                    "component only, unless the server runs with --show-folder-paths)")
    model_type: str
    engine: str
    engine_choice: str | None = Field(None, description="with --engine auto: why this engine was chosen")
    weights: str = Field(description="float32, bfloat16 or int8")
    source_limit: int | None = Field(description="the most source tokens a sentence may have")
    max_sentence_tokens: int | None = Field(None, description="the most source tokens (</s> included) this server "
                                                              "reads of a sentence: a longer one is refused")
    attention_type: str | None = Field(description="the RNN's attention mechanism (bahdanau, luong_dot, ...; none: "
                                                   "no alignments); null for the Transformer's multi-head attention")
    attention: dict[str, list[int]] = Field(
        default_factory=dict, description="the attention maps a view can show: kind (cross, encoder) -> [layers, "
                                          "heads]; empty for an engine or model without attention weights")
    max_sentences: int | None = Field(None, description="the most sentences a request may hold")
    max_beams: int | None = Field(None, description="the most beams a request may ask for")
    num_beams: int = Field(description="the beam size when a request gives none")
    max_len_a: float | None
    max_len_b: int | None


class Health(BaseModel):
    status: str
    models: list[str]
    queued_sentences: int


class Error(BaseModel):
    error: str = Field(description="what was wrong, in one sentence")
    detail: list | None = Field(None, description="the validation errors, for a body that does not fit the schema")


def with_limits(openapi: dict, models: list[str], limits) -> dict:
    """The OpenAPI schema ``openapi`` with what this server accepts written into the request's schema: one to
    ``limits.max_sentences`` sentences, a served model's name, one to ``limits.max_beams`` beams and hypotheses, and
    glossary entries of two strings. (What cannot be said in a schema, such as a sentence's length in tokens or an
    answer's size, is refused with its own message.)"""
    properties = openapi["components"]["schemas"]["TranslateRequest"]["properties"]
    properties["sentences"].update(minItems=1, maxItems=limits.max_sentences)
    _branch(properties["model"], "string").update(enum=list(models))
    _branch(properties["num_beams"], "integer").update(minimum=1, maximum=limits.max_beams)
    properties["num_return_sequences"].update(minimum=1, maximum=limits.max_beams)
    glossary = _branch(properties["glossary"], "array")
    glossary.update(minItems=1)
    glossary["items"].update(minItems=2, maxItems=2)
    return openapi


def _branch(schema: dict, kind: str) -> dict:
    """The branch of type ``kind`` of an optional field's schema (``anyOf: [{type: kind}, {type: null}]``)."""
    return next(branch for branch in schema.get("anyOf", [schema]) if branch.get("type") == kind)


__all__ = ["Alignment", "AttentionMap", "AttentionView", "Error", "Health", "Hypothesis", "ModelInfo", "ScoreRequest",
           "ScoreResponse", "Scored", "Search", "TranslateRequest", "TranslateResponse", "Translation", "with_limits"]
