"""The vocabulary shortlist of a model folder, as the engines read it: checked against the folder's vocabulary
sizes before any weights load, with the command that builds one named where the folder has none.

The feature itself lives at the ``generate()`` level (:mod:`hf_s2s.models.shortlist`); glossaries in
:mod:`hf_s2s.inference.glossary`.
"""

from pathlib import Path

from ..models.shortlist import SHORTLIST_FILE, VocabularyShortlist


def folder_shortlist(folder: str | Path, config) -> VocabularyShortlist:
    """The shortlist saved in a model folder, checked against its config's vocabulary sizes; a ValueError says how to
    build one where the folder has none."""
    path = Path(folder) / SHORTLIST_FILE
    if not path.is_file():
        raise ValueError(f"{folder} holds no {SHORTLIST_FILE} (--shortlist): build it with hf-s2s build-shortlist "
                         f"{folder}")
    shortlist = VocabularyShortlist.load(path)
    shortlist.check_fits(config.vocab_size, config.target_vocab_size, str(folder))
    return shortlist


__all__ = ["folder_shortlist"]
