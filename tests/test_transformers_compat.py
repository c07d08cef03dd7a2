"""hf_s2s inside the transformers releases it supports (hf_s2s/models/transformers_compat.py): the version check, where
hf_s2s is imported and where a saved folder is loaded without it; the release recorded in config.json; and the
rule that transformers' private methods are reached from one module, with the few overrides elsewhere listed here
so that a new one is a decision, not an accident."""

import ast
import json
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import transformers

import hf_s2s
from hf_s2s.models import transformers_compat
from hf_s2s.models.transformers_compat import (
    MIN_TRANSFORMERS_VERSION,
    TESTED_TRANSFORMERS_VERSIONS,
    check_transformers_version,
    release,
)
from tests.helpers import TINY, random_tiny_model, run_without_hf_s2s

pytestmark = pytest.mark.compat

PACKAGE = Path(hf_s2s.__file__).parent
COMPAT_MODULE = "models/transformers_compat.py"  # relative to PACKAGE


def test_pyproject_lower_bound_is_the_minimum_the_code_checks():
    text = (PACKAGE.parent / "pyproject.toml").read_text()
    assert f'"transformers>={MIN_TRANSFORMERS_VERSION.removesuffix(".0")},<6"' in text


def test_every_lower_bound_in_pyproject_is_pinned_in_the_oldest_constraints():
    """CI's compatibility tier installs constraints/oldest.txt: a bound that is not pinned there is not tested."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    bounds = {}
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[.*\])?(?:>=([0-9.]+))?(?:,<[0-9.]+)?", requirement)
        assert match, f"unexpected requirement form {requirement!r}"
        if match[2]:
            bounds[match[1].lower().replace("-", "_")] = release(match[2])
    pins = {}
    for line in (PACKAGE.parent / "constraints" / "oldest.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower().replace("-", "_")] = release(version)
    assert bounds and {name: pins.get(name) for name in bounds} == bounds


@pytest.mark.parametrize(("version", "expected"), [
    ("5.24.0", (5, 24, 0)), ("5.25.0.dev0", (5, 25, 0)), ("6.0", (6, 0, 0)), ("5.23.0rc1", (5, 23, 0)),
])
def test_release_reads_the_numbers_of_a_version(version, expected):
    assert release(version) == expected


def test_an_older_transformers_is_an_error_naming_the_required_version():
    with pytest.raises(ImportError, match=r"needs transformers>=5\.23\.0 .*found 5\.22\.2.*pip install"):
        check_transformers_version("5.22.2")


def test_a_newer_major_version_warns_once_and_the_tested_ones_are_silent():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for version in (*TESTED_TRANSFORMERS_VERSIONS, "5.99.1"):
            check_transformers_version(version)
        assert caught == []
        check_transformers_version("6.0.0")
    assert len(caught) == 1 and "tested with transformers 5.23.0" in str(caught[0].message)


@pytest.mark.slow
def test_import_hf_s2s_under_an_older_transformers_names_the_required_version(tmp_path):
    script = "import transformers; transformers.__version__ = '5.20.0'\nimport hf_s2s\n"
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                               timeout=300)
    assert completed.returncode != 0
    assert "ImportError: hf_s2s needs transformers>=5.23.0" in completed.stderr.splitlines()[-1]


@pytest.mark.slow
@pytest.mark.parametrize("model_type", list(TINY))
def test_saved_folder_records_the_release_and_checks_the_version_without_hf_s2s(model_type, tmp_path):
    """config.json names the hf_s2s release that wrote it; a folder loaded where hf_s2s is not installed runs the
    same version check (its code is copied with it) before any other transformers import can fail."""
    model = random_tiny_model(model_type, vocab_size=20)
    model.save_pretrained(tmp_path / "model")
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["hf_s2s_version"] == hf_s2s.__version__
    assert (tmp_path / "model" / "transformers_compat.py").read_bytes() == (PACKAGE / COMPAT_MODULE).read_bytes()
    loads = f"""
        import json, transformers
        from transformers import AutoConfig
        try:
            config = AutoConfig.from_pretrained({str(tmp_path / "model")!r}, trust_remote_code=True)
            print(json.dumps({{"version": config.hf_s2s_version}}))
        except ImportError as exc:
            print(json.dumps({{"error": str(exc)}}))
        """
    assert run_without_hf_s2s(loads, cwd=tmp_path) == {"version": hf_s2s.__version__}
    older = run_without_hf_s2s("import transformers; transformers.__version__ = '5.20.0'\n" + textwrap.dedent(loads),
                               cwd=tmp_path)
    assert "needs transformers>=5.23.0" in older["error"]


# Every super()._name(...) call into transformers outside transformers_compat.py, each a decision (see the
# compat module's docstring): a new one, or one moved, fails here until it is listed.
PRIVATE_OVERRIDES = {
    ("training/trainer.py", "_get_train_sampler"),
    ("training/trainer.py", "_run_epoch"),
    ("training/trainer.py", "_issue_warnings_after_load"),
    ("models/modeling_common.py", "_resize_token_embeddings"),
    ("models/tokenization_separate_vocab.py", "_decode"),
    ("models/tokenization_separate_vocab.py", "_save_pretrained"),
    ("cli/__init__.py", "_get_help_string"),  # argparse's HelpFormatter, not transformers
}
# Private attributes of transformers objects that only transformers_compat.py may read or write.
COMPAT_ONLY_ATTRIBUTES = {"_eos_token_tensor", "_pad_token_tensor", "_from_model_config", "_attn_implementation",
                          "_prepare_generate_kwargs", "_prepare_generation_config", "_get_logits_processor",
                          "_prepare_cache_for_generation", "_supports_default_dynamic_cache", "_reorder_cache"}


def _private_uses() -> tuple[set, set]:
    overrides, attributes = set(), set()
    for path in PACKAGE.rglob("*.py"):
        name = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name) and node.value.func.id == "super"
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                overrides.add((name, node.attr))
            if isinstance(node, ast.Attribute) and node.attr in COMPAT_ONLY_ATTRIBUTES:
                attributes.add((name, node.attr))
            if isinstance(node, ast.FunctionDef) and node.name in COMPAT_ONLY_ATTRIBUTES:
                attributes.add((name, node.name))
    return overrides, attributes


def test_transformers_private_api_is_reached_from_the_compat_module_only():
    overrides, attributes = _private_uses()
    assert {use for use in overrides if use[0] != COMPAT_MODULE} == PRIVATE_OVERRIDES
    assert {use for use in attributes if use[0] != COMPAT_MODULE} == set()
    # the compat module's docstring lists each hook it overrides
    for _, hook in overrides & {(COMPAT_MODULE, name) for name in COMPAT_ONLY_ATTRIBUTES}:
        assert f"``{hook}``" in transformers_compat.__doc__


def test_the_cache_name_is_the_one_the_installed_transformers_reads():
    fields = transformers.modeling_outputs.Seq2SeqLMOutput.__dataclass_fields__
    assert transformers_compat.CACHE_NAME in fields
    expected = "cache" if release(transformers.__version__) >= (5, 24, 0) else "past_key_values"
    assert transformers_compat.CACHE_NAME == expected
