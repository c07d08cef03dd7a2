"""The vocabulary shortlist and the glossary as ``hf-s2s translate`` and ``hf-s2s serve`` take them: read and checked
before any weights load, with what they cannot be combined with refused by name.

The features themselves live at the ``generate()`` level (:mod:`hf_s2s.models.shortlist`,
:mod:`hf_s2s.models.term_constraints`) and in :mod:`hf_s2s.inference.glossary`; ``translate()`` passes them on.
"""

from pathlib import Path

from ..models.shortlist import SHORTLIST_FILE, VocabularyShortlist
from .glossary import Glossary


def folder_shortlist(folder: str | Path, config) -> VocabularyShortlist:
    """The shortlist saved in a model folder, checked against its config's vocabulary sizes; a ValueError says how to
    build one where the folder has none."""
    path = Path(folder) / SHORTLIST_FILE
    if not path.is_file():
        raise ValueError(f"{folder} holds no {SHORTLIST_FILE}: build it with hf-s2s build-shortlist {folder}")
    shortlist = VocabularyShortlist.load(path)
    shortlist.check_fits(config.vocab_size, config.target_vocab_size, str(folder))
    return shortlist


def read_glossary(path: str | Path, tokenizer) -> Glossary:
    """A glossary file, with every target term checked to be writable by the model's target vocabulary."""
    glossary = Glossary.from_tsv(path)
    glossary.check_target_terms(tokenizer)
    return glossary


def check_lexical_options(*, shortlist: bool, glossary: bool, engine: str = "torch", int8: bool = False,
                          coverage_penalty: float = 0.0, plotting: bool = False) -> None:
    """Refuse, naming the flags, what cannot be combined with ``--shortlist`` or ``--glossary``: both are decoded by
    ``generate()`` (the torch engine); the shortlist gathers rows of a float output layer (not ``--int8``'s) and
    decodes in reduced ids that the coverage penalty's processor would misread; a plot decodes one sentence
    without them."""
    asked = [flag for flag, given in (("--shortlist", shortlist), ("--glossary", glossary)) if given]
    if not asked:
        return
    named = " and ".join(asked)
    if engine != "torch":
        raise ValueError(f"{named} decode through generate(): use --engine torch, not {engine}")
    if plotting:
        raise ValueError(f"{named} apply to translations, not to a plot: leave them out of --plot-* commands")
    if shortlist and int8:
        raise ValueError("--shortlist gathers rows of the float output layer, which --int8 quantizes: give one of them")
    if shortlist and coverage_penalty:
        raise ValueError("--shortlist decodes over reduced token ids, which --coverage-penalty does not read: give "
                         "one of them")


__all__ = ["check_lexical_options", "folder_shortlist", "read_glossary"]
