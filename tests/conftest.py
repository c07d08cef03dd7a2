"""Test setup: never reach the network, and keep the Hugging Face cache (remote code modules included) in a
temporary folder. This runs before any test module imports transformers. Where the checkout has the shared Multi30k
beside it, the tests that read the real corpus find it through $HF_S2S_DATA_DIR, as the checkout's scripts do
(scripts/checkout.py); elsewhere they skip."""

import os
import sys
import tempfile
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="hf_s2s_test_home_")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from checkout import use_shared_corpus  # noqa: E402  (scripts/checkout.py)

use_shared_corpus([])
