"""What running a command from a development checkout adds: the corpora this project's machines keep beside the
checkout, in ``../shared/data``. The library never looks there by itself (it reads ``--data_dir``, then
``$HF_S2S_DATA_DIR``, then the Hub); the scripts in this folder point ``$HF_S2S_DATA_DIR`` at the shared Multi30k
when neither is given and the folder exists."""

import os
from pathlib import Path

from hf_s2s.data.corpus import DATA_DIR_ENV

SHARED_MULTI30K = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "multi30k"


def use_shared_corpus(argv: list[str]) -> None:
    """Set ``$HF_S2S_DATA_DIR`` to the shared Multi30k beside the checkout, unless ``argv`` passes ``--data_dir``,
    the variable is already set, or there is no such folder."""
    given = any(arg == "--data_dir" or arg.startswith("--data_dir=") for arg in argv)
    if not given and not os.environ.get(DATA_DIR_ENV) and SHARED_MULTI30K.is_dir():
        os.environ[DATA_DIR_ENV] = str(SHARED_MULTI30K)
