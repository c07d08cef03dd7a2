"""The vocabulary shortlist of a model folder, as the engines read it: checked against the folder (its vocabulary sizes,
its tokenizer and the direction it translates) before any weights load, with the command that builds one named where
the folder has none; and, for a process that runs for days (``hf-s2s serve``), read again when its file changes.

The feature itself lives at the ``generate()`` level (:mod:`hf_s2s.models.shortlist`); glossaries in
:mod:`hf_s2s.models.term_constraints`.
"""

import json
import logging
import os
from pathlib import Path

from ..models.shortlist import SHORTLIST_FILE, VocabularyShortlist

logger = logging.getLogger(__name__)

# The file of a folder written by hf-s2s train that names the languages it translates (hf_s2s.hub.results writes it).
RESULTS_FILE = "results.json"


def folder_languages(folder: str | Path) -> tuple[str, str] | None:
    """The (source, target) languages a model folder translates, as its training run recorded them
    (``results.json``), or None where it records none (a converted folder, one saved by hand)."""
    path = Path(folder) / RESULTS_FILE
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    languages = (results.get("source_lang"), results.get("target_lang")) if isinstance(results, dict) else ()
    return languages if all(isinstance(language, str) for language in languages) and languages else None


def folder_shortlist(folder: str | Path, config, tokenizer) -> VocabularyShortlist:
    """The shortlist saved in a model folder, read whole and checked against its config's vocabulary sizes, its
    ``tokenizer`` and its languages (:meth:`VocabularyShortlist.check_folder`); a ValueError says how to build one
    where the folder has none or the file was built for another model."""
    path = Path(folder) / SHORTLIST_FILE
    if not path.is_file():
        raise ValueError(f"{folder} holds no {SHORTLIST_FILE} (--shortlist): build it with hf-s2s build-shortlist "
                         f"{folder}")
    shortlist = VocabularyShortlist.load(path)
    try:
        shortlist.check_fits(config.vocab_size, config.target_vocab_size, str(folder))
        shortlist.check_folder(tokenizer, folder_languages(folder), str(folder), str(folder))
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    return shortlist


class ShortlistFile:
    """A folder's shortlist as a long-running process reads it: read whole and checked (:func:`folder_shortlist`)
    when first asked for, then read again whenever its file changes on disk (size, times or inode): a file replaced
    by a valid one is used from the next request on; one that is missing, damaged or built for another model leaves
    the last valid shortlist in use, said in a warning once per change. Nothing of the file stays mapped, so no
    change on disk can take the process down."""

    def __init__(self, folder: str | Path, config, tokenizer):
        self.folder, self.config, self.tokenizer = folder, config, tokenizer
        self.path = Path(folder) / SHORTLIST_FILE
        self.shortlist: VocabularyShortlist | None = None  # the last valid one read
        self._seen = None  # the file's stat key when last read, valid or not

    def current(self) -> VocabularyShortlist:
        """The shortlist to decode with now, read again first if the file changed; a ValueError where no valid one
        was ever read (the folder has none, or its file is damaged or another model's)."""
        try:
            stat = os.stat(self.path)
            key = (stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
        except OSError:
            key = None
        if self.shortlist is not None and key == self._seen:
            return self.shortlist
        self._seen = key
        try:
            shortlist = folder_shortlist(self.folder, self.config, self.tokenizer)
        except ValueError as error:
            if self.shortlist is None:
                raise
            logger.warning("%s changed and cannot be used (%s): the shortlist read before goes on serving", self.path,
                           error)
            return self.shortlist
        if self.shortlist is not None:
            logger.info("%s changed: its new shortlist is used from now on", self.path)
        self.shortlist = shortlist
        return shortlist


__all__ = ["RESULTS_FILE", "ShortlistFile", "folder_languages", "folder_shortlist"]
