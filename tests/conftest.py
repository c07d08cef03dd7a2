"""Test setup: never reach the network, and keep the Hugging Face cache (remote code modules included) in a
temporary folder. This runs before any test module imports transformers."""

import os
import tempfile

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="hf_s2s_test_home_")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_DISABLED", "true")
