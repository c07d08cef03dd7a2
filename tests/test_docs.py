"""The documentation: the generated reference pages are those the code gives today, the site builds with no broken
link, and the links of README.md and docs/ resolve where GitHub renders them."""

import difflib
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hf_s2s.cli.reference import PAGES, config_fields
from hf_s2s.models.configuration_rnn_seq2seq import RNNSeq2SeqConfig
from hf_s2s.models.configuration_transformer_seq2seq import TransformerSeq2SeqConfig

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MARKDOWN = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def run(command: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_committed_reference_pages_are_what_the_code_generates(tmp_path):
    result = run([sys.executable, str(ROOT / "scripts" / "gen_docs_reference.py"), "--output-dir", str(tmp_path)],
                 tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    for name in PAGES:
        committed = (DOCS / name).read_text(encoding="utf-8").splitlines()
        generated = (tmp_path / name).read_text(encoding="utf-8").splitlines()
        diff = list(difflib.unified_diff(committed, generated, f"docs/{name}", "generated", lineterm="", n=1))
        assert not diff, (f"docs/{name} is stale: run `python scripts/gen_docs_reference.py` and commit it\n"
                          + "\n".join(diff[:60]))


@pytest.mark.parametrize("config_class", [RNNSeq2SeqConfig, TransformerSeq2SeqConfig])
def test_the_configuration_page_lists_every_field_the_class_declares(config_class):
    declared = [name for name in config_class.__annotations__ if not name.startswith("_")]
    assert [f.name for f in config_fields(config_class)] == declared


def test_a_comment_continued_on_the_next_line_is_read_whole():
    fields = {f.name: f for f in config_fields(RNNSeq2SeqConfig)}
    assert fields["input_feeding"].comment.endswith("None = on for LUONG_STYLE_TYPES")
    assert fields["init_std"].comment.endswith("Matrices use Xavier, recurrent matrices orthogonal")
    assert fields["attention_type"].default == '"bahdanau"' and fields["decoder_vocab_size"].annotation == "int | None"
    assert fields["pad_token_id"].comment == ""  # no comment: nothing borrowed from a neighbour


def mkdocs_version() -> tuple[int, ...] | None:
    if importlib.util.find_spec("mkdocs") is None:
        return None
    return tuple(int(part) for part in re.findall(r"\d+", importlib.metadata.version("mkdocs"))[:2])


@pytest.mark.skipif(mkdocs_version() is None or mkdocs_version() < (1, 6),
                    reason="needs mkdocs>=1.6 (pip install -e '.[docs]'): it validates heading anchors")
def test_the_site_builds_in_strict_mode(tmp_path):
    result = run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
                  "--site-dir", str(tmp_path / "site")], tmp_path)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a markdown text (fenced code is not headings)."""
    text = re.sub(r"^```.*?^```", "", markdown, flags=re.MULTILINE | re.DOTALL)
    headings = re.findall(r"^#{1,6} (.+?)\s*$", text, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_to_a_file_and_heading(page):
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and anchor not in github_anchors(linked.read_text(encoding="utf-8")):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"
