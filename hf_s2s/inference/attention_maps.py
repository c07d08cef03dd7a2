"""One attention map out of a translation's weights, and what is read off it: the map a person looks at (one kind,
layer and head, or the mean of the heads; subword tokens or whole words), its hard alignment (each target token's
most attended source token, as Pharaoh ``i-j`` pairs), the coverage of each source token and the entropy of each
target token's attention, and the map written out as JSON, CSV or the line formats of Marian and OpenNMT-py.

The attention explorer (``hf-s2s serve``'s page) and ``hf-s2s translate --alignments`` / ``hf-s2s score
--alignments`` read maps through this module, so the page's exports and the command line's files hold the same
numbers.

Kinds: ``cross``, the decoder's attention over the source, a row per target token and a column per source token;
``encoder``, the Transformer encoder's self-attention, a row per attending and a column per attended source token.

Words: the pieces of a word are the tokens whose text, decoded, joins without a space (``▁Hund`` ``e`` -> "Hunde").
At the word level a column is a word's pieces summed (the attention a row paid to the whole word) and a row is the
mean of a word's pieces' rows (so rows still sum to 1); special tokens (``</s>``) stay rows and columns of their own.

Shapes: R rows, C columns; L layers, H heads, T target tokens, S source tokens.
"""

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch

from ..data.tokenization import target_side
from .forced import ForcedTranslation

KINDS = ("cross", "encoder")
# What each kind's rows and columns are, for labels and file headers: (rows, columns)
AXES = {"cross": ("target", "source"), "encoder": ("attending", "attended")}
# The line formats (after " ||| " on each output line) and the file formats of --alignments
LINE_FORMATS = ("pharaoh", "soft")
FILE_FORMATS = ("json", "csv")
ALIGNMENT_FORMATS = LINE_FORMATS + FILE_FORMATS
# How a word-level map merges pieces, said in the page's legend and in the files
WORD_LEVEL_RULE = "a source word's pieces summed, a target word's pieces averaged"


@dataclass
class AttentionMap:
    """One (R, C) attention map with its row and column labels."""

    kind: str  # "cross" or "encoder"
    layer: int  # from 0
    head: int | None  # from 0; None: the mean of the heads
    layers: int  # how many layers and heads the kind has (for a view's choices)
    heads: int
    word_level: bool
    rows: list[str]  # R labels: tokens, or words
    columns: list[str]  # C labels
    row_special: list[bool]  # which rows are special tokens (</s>), which a hard alignment leaves out
    column_special: list[bool]
    weights: torch.Tensor  # (R, C), each row sums to 1
    row_log_probs: list[float] | None = None  # cross: each row's log-probability (a word's: its pieces' summed)

    def to_dict(self) -> dict:
        """The map as JSON-ready values (the weights as nested lists of floats)."""
        return {"kind": self.kind, "layer": self.layer, "head": self.head, "layers": self.layers,
                "heads": self.heads, "word_level": self.word_level, "rows": self.rows, "columns": self.columns,
                "row_special": self.row_special, "column_special": self.column_special,
                "weights": self.weights.tolist(), "row_log_probs": self.row_log_probs}


def attention_shape(config, kind: str) -> tuple[int, int] | None:
    """(layers, heads) of ``kind`` attention in a model of ``config``, None where it has none: the RNN family's
    decoder attends through one mechanism (one "layer", ``attention_heads`` heads), its encoder not at all; an RNN
    with ``attention_type`` "none" has neither."""
    if kind == "encoder":
        heads = getattr(config, "encoder_attention_heads", None)
        return None if heads is None else (config.encoder_layers, heads)
    if getattr(config, "attention_type", None) == "none":
        return None
    if hasattr(config, "decoder_attention_heads"):
        return config.decoder_layers, config.decoder_attention_heads
    return 1, getattr(config, "attention_heads", 1)


def check_view(config, kind: str, layer: int | None = None, head: int | None = None) -> None:
    """Refuse, from a model's ``config`` (so before its weights load), a view it does not have: a kind that is not one
    of :data:`KINDS` or that the model lacks, a layer or head out of range (None: the last layer, the mean of the
    heads)."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not an attention kind; choose one of {', '.join(KINDS)}")
    shape = attention_shape(config, kind)
    if shape is None:
        what = ("encoder self-attention: its encoder reads the source in order" if kind == "encoder"
                else "attention over the source (attention_type 'none')")
        raise ValueError(f"this {config.model_type} model has no {what}")
    _check_range(kind, layer, head, *shape)


def _check_range(kind: str, layer: int | None, head: int | None, layers: int, heads: int) -> None:
    for name, value, count in (("layer", layer, layers), ("head", head, heads)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < count):
            raise ValueError(f"{name} {value!r} is out of range: the {kind} attention has {count} {name}"
                             f"{'s' if count != 1 else ''}{' per layer' if name == 'head' else ''}, numbered 0 to "
                             f"{count - 1}")


def word_ids(tokenizer, ids: list[int]) -> list[int | None]:
    """The word each token of ``ids`` belongs to (0, 1, ...), None for a special token (</s>, <pad>, <s>; <unk>
    stands for text, so it is a piece of a word). A token starts a word where the text decoded so far ends in a space
    before it (or it is the first), which holds for every tokenizer whose decoder restores spaces: the Metaspace
    pieces (``▁``) trained here and by SentencePiece, byte fallback, and subword-nmt's ``@@``."""
    special = set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}
    found, kept = [], []
    for token in ids:
        if token in special:
            found.append(None)
            continue
        kept.append(token)
        # the marker "x" is its own word where the text so far ends in a space, and joins the last word otherwise
        text = tokenizer.decode(kept, clean_up_tokenization_spaces=False) + "x"
        found.append(len(text.split()) - 1)
    return found


def _units(words: list[int | None]) -> list[list[int]]:
    """Positions grouped into words: consecutive positions of one word together, each special token alone."""
    units: list[list[int]] = []
    for position, word in enumerate(words):
        if word is not None and units and words[units[-1][0]] == word:
            units[-1].append(position)
        else:
            units.append([position])
    return units


@dataclass
class _Axis:
    """The tokens along one side of a map, and their words."""

    tokenizer: object  # the side's tokenizer (the target side's for target rows)
    ids: list[int]
    tokens: list[str]
    words: list[int | None]  # word_ids()

    def units(self, word_level: bool) -> list[list[int]]:
        return _units(self.words) if word_level else [[position] for position in range(len(self.ids))]

    def labels(self, units: list[list[int]], word_level: bool) -> list[str]:
        """A label per unit: the token, or the word's text (a special token's own)."""
        if not word_level:
            return list(self.tokens)
        return [self.tokens[unit[0]] if self.words[unit[0]] is None
                else self.tokenizer.decode([self.ids[p] for p in unit], clean_up_tokenization_spaces=False).strip()
                or self.tokens[unit[0]] for unit in units]


def merge_words(weights: torch.Tensor, row_units: list[list[int]], column_units: list[list[int]]) -> torch.Tensor:
    """``weights`` (R, C) merged into words: each column unit's columns summed, each row unit's rows averaged."""
    columns = torch.stack([weights[:, unit].sum(dim=1) for unit in column_units], dim=1)  # (R, words)
    return torch.stack([columns[unit].mean(dim=0) for unit in row_units])  # (row words, column words)


def attention_map(forced: ForcedTranslation, tokenizer, *, kind: str = "cross", layer: int | None = None,
                  head: int | None = None, word_level: bool = False) -> AttentionMap:
    """The map of ``forced`` (read with ``output_attentions``) a person chose: ``kind`` (:data:`KINDS`), ``layer``
    (None: the last) and ``head`` (None: the mean of the heads), of tokens or of words (``word_level``)."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not an attention kind; choose one of {', '.join(KINDS)}")
    weights = forced.cross_attentions if kind == "cross" else forced.encoder_attentions
    if kind == "encoder" and weights is None and forced.cross_attentions is not None:
        raise ValueError("this model has no encoder self-attention (an RNN encoder reads the source in order): "
                         "choose kind 'cross'")
    if weights is None:
        raise ValueError("these pairs were read without attention weights (output_attentions=False)")
    _check_range(kind, layer, head, weights.shape[0], weights.shape[1])
    layer = weights.shape[0] - 1 if layer is None else layer
    matrix = weights[layer].mean(dim=0) if head is None else weights[layer, head]  # (R, C)
    source = _Axis(tokenizer, forced.source_ids, forced.source_tokens, word_ids(tokenizer, forced.source_ids))
    if kind == "cross":
        target = target_side(tokenizer)
        rows = _Axis(target, forced.target_ids, forced.target_tokens, word_ids(target, forced.target_ids))
    else:
        rows = source
    row_units, column_units = rows.units(word_level), source.units(word_level)
    if word_level:
        matrix = merge_words(matrix, row_units, column_units)
    log_probs = None
    if kind == "cross":
        log_probs = [sum(forced.token_log_probs[p] for p in unit) for unit in row_units]
    return AttentionMap(kind=kind, layer=layer, head=head, layers=weights.shape[0], heads=weights.shape[1],
                        word_level=word_level, rows=rows.labels(row_units, word_level),
                        columns=source.labels(column_units, word_level),
                        row_special=[rows.words[unit[0]] is None for unit in row_units],
                        column_special=[source.words[unit[0]] is None for unit in column_units],
                        weights=matrix.float(), row_log_probs=log_probs)


# ------------------------------------------------------------------------------------------- read off a map


def hard_alignment(found: AttentionMap) -> list[tuple[int, int]]:
    """Each row's most attended column, as (column, row) pairs (source-target, the order of Pharaoh files), counted
    from 0 and sorted by column then row, as OpenNMT-py's ``-report_align`` and Marian's ``--alignment hard`` write
    them: special rows and columns (</s>) are left out, as OpenNMT-py leaves them (Marian keeps the </s> pair); a tie
    goes to the first column."""
    columns = [c for c, special in enumerate(found.column_special) if not special]
    if not columns:
        return []
    pairs = []
    for row, special in enumerate(found.row_special):
        if special:
            continue
        values = found.weights[row, columns].tolist()
        pairs.append((columns[values.index(max(values))], row))
    return sorted(pairs)


def pharaoh(pairs: list[tuple[int, int]]) -> str:
    """``i-j`` pairs separated by spaces (Pharaoh / Moses format)."""
    return " ".join(f"{i}-{j}" for i, j in pairs)


def soft_line(found: AttentionMap) -> str:
    """The map as Marian's ``--alignment soft`` writes it: the rows separated by spaces, a row's weights by commas."""
    return " ".join(",".join(f"{weight:.6g}" for weight in row) for row in found.weights.tolist())


def coverage(found: AttentionMap) -> list[float]:
    """The attention each column received, summed over the rows (GNMT's coverage of a source token, Wu et al. 2016
    eq. 14 before its log): about 1 for a token translated once, 0 for a token no row looked at."""
    return found.weights.sum(dim=0).tolist()


def entropy(found: AttentionMap) -> list[float]:
    """Each row's entropy in nats, -sum p log p: 0 where a row attends to one column, log C where it spreads evenly."""
    weights = found.weights.double()
    return [-sum(p * math.log(p) for p in row if p > 0) for row in weights.tolist()]


def map_record(found: AttentionMap, sentence: int, hypothesis: int = 0) -> dict:
    """The map as one JSON object of a JSON Lines file (``--alignments json``): the sentence and hypothesis it
    belongs to (from 1 and from 0), its view, its labels and weights, its hard alignment."""
    return {"sentence": sentence, "hypothesis": hypothesis, **found.to_dict(),
            "alignment": pharaoh(hard_alignment(found)) if found.kind == "cross" else None,
            **({"word_level_rule": WORD_LEVEL_RULE} if found.word_level else {})}


def csv_header(kind: str) -> list[str]:
    rows, columns = AXES[kind]
    return ["sentence", "hypothesis", f"{rows}_index", rows, f"{columns}_index", columns, "weight"]


def csv_rows(found: AttentionMap, sentence: int, hypothesis: int = 0) -> list[list]:
    """The map in long form, a line per cell (``--alignments csv``): sentence (from 1), hypothesis (from 0), row
    index and label, column index and label, weight."""
    return [[sentence, hypothesis, r, found.rows[r], c, found.columns[c], weight]
            for r, row in enumerate(found.weights.tolist()) for c, weight in enumerate(row)]


class AlignmentWriter:
    """Where ``--alignments FORMAT`` goes: a line format (:data:`LINE_FORMATS`) after " ||| " on each output line, as
    Marian and OpenNMT-py print it, or on a line of its own in ``path`` when given; a file format
    (:data:`FILE_FORMATS`) into ``path``: JSON Lines (:func:`map_record`) or long-form CSV (:func:`csv_rows`)."""

    def __init__(self, form: str, path: str | Path | None = None, kind: str = "cross"):
        if form not in ALIGNMENT_FORMATS:
            raise ValueError(f"--alignments {form!r}: choose one of {', '.join(ALIGNMENT_FORMATS)}")
        if form in FILE_FORMATS and path is None:
            raise ValueError(f"--alignments {form} writes a file: name it with --alignments-output")
        self.form, self.path, self.kind = form, path, kind
        self._file = None

    def __enter__(self) -> "AlignmentWriter":
        if self.path is not None:
            self._file = open(self.path, "w", encoding="utf-8", newline="")  # noqa: SIM115 (closed by __exit__)
            if self.form == "csv":
                self._file.write(to_csv([csv_header(self.kind)]))
        return self

    def __exit__(self, *exc) -> None:
        if self._file is not None:
            self._file.close()

    def line(self, found: AttentionMap) -> str:
        """The map in the line format."""
        return pharaoh(hard_alignment(found)) if self.form == "pharaoh" else soft_line(found)

    def suffix(self, found: AttentionMap, sentence: int, hypothesis: int = 0) -> str:
        """What follows an output line: " ||| " and the map in a line format printed inline; otherwise nothing, the
        map going to the file (``sentence`` from 1, ``hypothesis`` from 0)."""
        if self._file is None:
            return f" ||| {self.line(found)}"
        if self.form == "json":
            self._file.write(to_json_line(map_record(found, sentence, hypothesis)) + "\n")
        elif self.form == "csv":
            self._file.write(to_csv(csv_rows(found, sentence, hypothesis)))
        else:
            self._file.write(self.line(found) + "\n")
        return ""


    def blank(self, sentence: int) -> str:
        """:meth:`suffix` for a blank sentence, which was not decoded: an empty alignment inline or on its line, a
        record saying so in JSON Lines, nothing in CSV."""
        if self._file is None:
            return " ||| "
        if self.form == "json":
            self._file.write(to_json_line({"sentence": sentence, "hypothesis": 0, "blank": True}) + "\n")
        elif self.form in LINE_FORMATS:
            self._file.write("\n")
        return ""


def to_csv(rows: list[list]) -> str:
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows(rows)
    return buffer.getvalue()


def to_json_line(record: dict) -> str:
    return json.dumps(record, ensure_ascii=False)


__all__ = ["ALIGNMENT_FORMATS", "AXES", "AlignmentWriter", "FILE_FORMATS", "KINDS", "LINE_FORMATS", "WORD_LEVEL_RULE", "AttentionMap",
           "attention_map", "attention_shape", "check_view", "coverage", "csv_header", "csv_rows", "entropy", "hard_alignment",
           "map_record", "merge_words", "pharaoh", "soft_line", "to_csv", "to_json_line", "word_ids"]
