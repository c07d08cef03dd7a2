"""What ``hf-s2s serve`` checks of a model folder before loading it, beyond what every decoding tool checks
(:func:`hf_s2s.inference.ensemble.read_for_decoding`: a missing folder, config.json or tokenizer, a tokenizer that does
not fit its model): the folder may have been written by someone else, and a server should refuse at start what would
otherwise fail, or decode wrongly, on every request.

- A JSON file of the folder that does not parse, or holds something other than an object: transformers' own message
  names no file (or is a TypeError from deep inside it).
- A generation config that names no decoder start token or no end token: every request would fail in
  ``generate()``. Without generation_config.json, transformers builds the generation config from
  config.json, so that file's tokens are checked; the model then decodes with its family's default
  lengths, as ``hf-s2s translate`` does, and the load says so in one warning line
  (``GenerationLengthDefault.on_generation_config_loaded``).

How ``GET /models`` names a folder to any client is :func:`shown_folder`'s: as the server was started with it, never
the server's absolute paths unless asked for.

No optional dependency here (the config is read with transformers, as every command reads it), so that the command
checks folders before it needs the serve extra's packages.
"""

import json
from pathlib import Path

from ..models.loading import load_config

# The JSON files of a saved folder that loading reads.
JSON_FILES = ("config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json")
# The special tokens generate() needs from the generation config, each by the fields that can give it.
_NEEDED_TOKENS = (("decoder_start_token_id", "bos_token_id"), ("eos_token_id",))
# The section of docs/serving.md that says how to write a folder's generation config.
FIX_SECTION = "A folder without its generation config"


def check_model_folder(folder: str | Path) -> None:
    """A ValueError naming the file and what to do where ``folder`` holds a JSON file that is not a JSON
    object, or a generation config (generation_config.json, else the config.json transformers builds it
    from) without the special tokens decoding needs. A path that is not a local folder is left to the
    loader, which says what it is."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    files = {name: _read_json_object(folder / name) for name in JSON_FILES if (folder / name).is_file()}
    if "config.json" not in files:
        return  # the loader says the folder holds no config.json
    load_config(folder)  # a folder that needs code of its own to load is named as such, whatever else it lacks
    name = "generation_config.json" if "generation_config.json" in files else "config.json"
    missing = [names[0] for names in _NEEDED_TOKENS if all(files[name].get(field) is None for field in names)]
    if missing:
        raise ValueError(f"{folder / name} names no {' and no '.join(missing)}: generate() cannot decode "
                         "without; write the generation config again from config.json (docs/serving.md, "
                         f"{FIX_SECTION!r}, says how)")


def _read_json_object(path: Path) -> dict:
    try:
        value = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON ({error}): the folder is damaged; copy or save it again") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path} holds a JSON {type(value).__name__}, not an object: it is no saved {path.name}; copy "
                         "or save the folder again")
    return value


def shown_folder(folder: str | Path, absolute: bool = False) -> str:
    """How ``GET /models`` names a served folder: as the server was started with it (a relative path as given), but
    an absolute path by its last component only, so that no client learns where the server keeps its files; with
    ``absolute`` (``hf-s2s serve --show-folder-paths``), the absolute path."""
    path = Path(folder)
    if absolute:
        return str(path.resolve())
    return path.name if path.is_absolute() else str(folder)


__all__ = ["FIX_SECTION", "JSON_FILES", "check_model_folder", "shown_folder"]
