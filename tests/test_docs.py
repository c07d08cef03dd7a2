"""The documentation: the generated reference pages are those the code gives today, the site builds with no
broken link, the links of README.md and docs/ resolve where GitHub renders them, and every command they name
runs: its program exists and starts (``--help``), and its flags are the program's."""

import argparse
import ast
import contextlib
import difflib
import functools
import importlib.metadata
import importlib.util
import io
import itertools
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest
from accelerate.commands.launch import launch_command_parser

from hf_s2s.cli import COMMANDS
from hf_s2s.cli import main as hf_s2s_main
from hf_s2s.cli.reference import PAGES, command_parser, config_fields
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


# --- Every pointer in plain text (a help text cannot link) leads somewhere -----------------------------------
# "docs/inference.md", "docs/hub.md#pushing-a-trained-folder", 'docs/inference.md, "Export to CTranslate2"',
# 'README: "Two commands"', 'the README's "Two commands"', and in a page, 'see "Length caps"' (its own heading).

PAGE_NAME = r"(?<![\w/.-])(?P<page>README(?:\.md)?|docs/[\w-]+\.md)"
POINTERS = (
    re.compile(PAGE_NAME + r"#(?P<anchor>[\w-]+)"),
    re.compile(PAGE_NAME + r"(?:'s)?[:,]? (?:section )?\"(?P<heading>[^\"]+)\""),
    re.compile(PAGE_NAME),
    re.compile(r"\b[Ss]ee \"(?P<heading>[^\"]+)\""),  # a heading of the page it is in
)


def headings(markdown: str) -> list[str]:
    """The headings of a markdown text, as written (fenced code is not headings)."""
    text = re.sub(r"^```.*?^```", "", markdown, flags=re.MULTILINE | re.DOTALL)
    return re.findall(r"^#{1,6} (.+?)\s*$", text, flags=re.MULTILINE)


def pointer_problems(text: str, page: Path | None) -> list[str]:
    """What is wrong with each pointer of :data:`POINTERS` in ``text`` (of ``page``, or a help text when None):
    a page that does not exist, an anchor or a quoted heading (its start) the page does not have. Words split
    across lines (a help text wrapped by argparse) are joined first."""
    text = " ".join(text.split())
    problems = []
    for pattern in POINTERS:
        for found in pattern.finditer(text):
            named = found.groupdict().get("page")
            if named is None and page is None:
                continue  # "see" in a help text names no page
            target = page if named is None else ROOT / ("README.md" if named.startswith("README") else named)
            if not target.is_file():
                problems.append(f"{found.group(0)!r}: no such page")
                continue
            anchor, heading = found.groupdict().get("anchor"), found.groupdict().get("heading")
            markdown = target.read_text(encoding="utf-8")
            if anchor and anchor not in github_anchors(markdown):
                problems.append(f"{found.group(0)!r}: {target.relative_to(ROOT)} has no heading #{anchor}")
            if heading and not any(title.startswith(heading) for title in headings(markdown)):
                problems.append(f"{found.group(0)!r}: {target.relative_to(ROOT)} has no heading {heading!r}")
    return problems


def help_texts() -> dict[str, str]:
    """What ``hf-s2s COMMAND --help`` prints, per command."""
    return {name: command_parser(name).format_help() for name in COMMANDS}


def test_every_pointer_a_help_text_or_page_names_exists():
    problems = [f"hf-s2s {name} --help: {problem}" for name, text in help_texts().items()
                for problem in pointer_problems(text, None)]
    problems += [f"{page.relative_to(ROOT)}: {problem}" for page in MARKDOWN
                 for problem in pointer_problems(page.read_text(encoding="utf-8"), page)]
    assert not problems, "\n".join(problems)


def test_the_pointer_check_finds_what_it_is_for():
    """The forms above are found, and a stale one is named."""
    assert pointer_problems('(README: "Export to CTranslate2")', None) == [
        "'README: \"Export to CTranslate2\"': README.md has no heading 'Export to CTranslate2'"]
    assert pointer_problems('docs/inference.md, "Export to CTranslate2" and docs/hub.md#pushing-a-trained-folder',
                            None) == []
    assert pointer_problems("see docs/nowhere.md and docs/hub.md#nowhere", None) == [
        "'docs/hub.md#nowhere': docs/hub.md has no heading #nowhere", "'docs/nowhere.md': no such page"]
    assert pointer_problems('see "Nowhere" below', DOCS / "importers.md") == [
        "'see \"Nowhere\"': docs/importers.md has no heading 'Nowhere'"]
    assert pointer_problems("model/README.md holds the card", None) == []  # a model folder's file: no pointer


def test_the_docs_index_links_every_page():
    linked = set(re.findall(r"\]\(([\w-]+\.md)(?:#[\w-]+)?\)", (DOCS / "index.md").read_text(encoding="utf-8")))
    pages = {page.name for page in DOCS.glob("*.md")} - {"index.md"}
    assert not pages - linked, f"docs/index.md does not link {sorted(pages - linked)}"


def test_the_readme_command_table_names_every_command():
    rows = re.findall(r"^\| `hf-s2s ([\w-]+)[ `]", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert sorted(set(COMMANDS) - set(rows)) == [], "README.md's command table leaves these out"


def docstring_lines(path: Path) -> tuple[int, int]:
    """How many lines a module's docstring takes in the file, and how many its text has: fewer when a line ends
    with a lone backslash, which Python reads as a line continuation and drops with the line break."""
    node = ast.parse(path.read_text(encoding="utf-8")).body[0]
    assert isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant), f"{path} has no docstring"
    return node.end_lineno - node.lineno + 1, node.value.value.count("\n") + 1


@pytest.mark.parametrize("path", [*sorted((ROOT / "hf_s2s" / "cli").glob("*.py")), *sorted(ROOT.glob("scripts/*.py"))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_a_help_text_keeps_the_lines_of_its_examples(path):
    """A command's --help (its module's docstring) shows an example continued on a second line as written, the
    backslash included, not both lines run together."""
    written, shown = docstring_lines(path)
    assert shown == written, f"{path.relative_to(ROOT)}: a line of its docstring ends with a lone \\ (write \\\\)"


# --- Every command the README and docs name runs --------------------------------------------------------
# A command is found in a code block (bash, or the indented examples of a text block) or in inline code that
# starts with a program's name. hf_s2s's own programs (hf-s2s, python -m hf_s2s.cli, scripts/) run with --help
# in this process, and a whole command's arguments must parse with the parser that --help prints (inline code
# and a table's "..." are fragments: their flags must exist). Other programs are checked for existence here
# and run with --help in a process of their own by the slow test.

SHELL = {"echo", "printf", ".", "source", "cd", "export"}  # the shell's own words: nothing to run
# other programs the docs name, installed with the test extra (but curl), and how many words name a subcommand
# (two for hf auth login)
SUBCOMMAND_LEVELS = {"pip": 1, "accelerate": 1, "mkdocs": 1, "sacrebleu": 0, "hf": 2, "curl": 0}
OTHER_PROGRAMS = set(SUBCOMMAND_LEVELS)
PYTHON_MODULES = {"pytest", "venv", "mkdocs"}  # python -m MODULE, other than hf_s2s.cli
PLACEHOLDERS = {  # what the docs write for "any command", not a command
    ("hf-s2s", "COMMAND"), ("python", "scripts/NAME.py"),
}
NOT_RUN = {  # a command the docs name that this test does not run, and why
    "curl": "not a Python program (nor installed everywhere); tests/test_serve.py posts requests of the "
            "docs' shape (sentences, num_beams, scores) to a real server",
    "runs/transformer_small/onnx/onnx_runtime.py": "written by hf-s2s export-onnx into its output folder; "
                                                   "tests/test_onnx.py runs that file as a script",
    ".ci/run": "CI itself: two fresh virtual environments and the whole suite; checked to exist and be "
               "executable",
}


@dataclass(frozen=True)
class Named:
    """One simple command named in the docs (no pipe, redirection or variable assignment), where it is, and
    whether it is written whole (a code block) or as a fragment (inline code, or a table's "...")."""

    where: str
    words: tuple[str, ...]
    whole: bool

    def __str__(self):
        return f"{self.where}: {shlex.join(self.words)}"


def simple_commands(line: str) -> list[list[str]]:
    """The simple commands of a shell line: split at | && || ;, without redirections (> FILE, < FILE), leading
    VAR=value assignments or # comments."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands, words, redirected = [], [], False
    for word in lexer:
        if redirected:
            redirected = False
        elif word in ("|", "||", "&&", ";", "&"):
            commands.append(words)
            words = []
        elif word in (">", ">>", "<"):
            redirected = True
        elif words or not re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", word):
            words.append(word)
    return [words for words in [*commands, words] if words]


def is_program(word: str) -> bool:
    return word in ("hf-s2s", "python", "python3", *OTHER_PROGRAMS) or word.startswith(("scripts/", ".ci/"))


def logical_lines(block: str, examples_only: bool) -> list[tuple[int, str]]:
    """The lines of a code block, each with the index of its first line, with backslash continuations joined
    and a line that leaves a quote open joined with the next (a docstring's \n written into an example).
    ``examples_only``: only lines indented by four spaces (the examples of a command's docstring, among its
    prose)."""
    lines, pending, start = [], "", 0
    for index, line in enumerate(block.splitlines()):
        if not pending:
            if examples_only and not line.startswith("    "):
                continue
            start = index
        pending = f"{pending} {line.strip()}" if pending else line.strip()
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # no closing quotation
            pending += "\n"
            continue
        lines.append((start, pending))
        pending = ""
    return [*lines, (start, pending)] if pending else lines


FENCE = re.compile(r"^```(\w*)\n(.*?)^```", flags=re.MULTILINE | re.DOTALL)
# `x`, or `` x ` y `` (a span holding a backtick)
INLINE_CODE = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", flags=re.DOTALL)


def without_placeholders(code: str) -> str:
    """``runs/<recipe>/model`` as ``runs/RECIPE/model``: the docs' placeholder, not a shell redirection."""
    return re.sub(r"<([a-z_-]+)>", lambda match: match.group(1).upper(), code)


def named_commands(page: Path) -> list[Named]:
    """Every command ``page`` names: each line of its bash blocks, the examples of its text blocks that start
    with a program, and its inline code that starts with one."""
    text = page.read_text(encoding="utf-8")
    name = page.relative_to(ROOT)
    found = []
    for fence in FENCE.finditer(text):
        language, block = fence.groups()
        if language in ("python", "json"):
            continue
        first_line = text.count("\n", 0, fence.start(2)) + 1
        for index, line in logical_lines(block, examples_only=language != "bash"):
            starts = line.split()[0] if line else ""
            if not line or (language != "bash" and not (is_program(starts) or starts in SHELL)):
                continue
            where = f"{name}:{first_line + index}"
            commands = simple_commands(without_placeholders(line))
            found += [Named(where, tuple(words), whole=True) for words in commands]
    # code blocks blanked, lines kept, but for the prose of text blocks (a docstring, with inline code)
    prose = FENCE.sub(lambda fence: "\n" + fence.group(2) if fence.group(1) == "text"
                      else "\n" * fence.group(0).count("\n"), text)
    for span in INLINE_CODE.finditer(prose):
        code = " ".join(without_placeholders(span.group(2)).split())
        where = f"{name}:{prose.count(chr(10), 0, span.start()) + 1}"
        try:
            commands = simple_commands(code)
        except ValueError:  # not shell words (an apostrophe): a command's name then reads as plain words
            commands = [code.split()]
        for words in commands:
            if is_program(words[0]):
                fragment = words[-1] == "..."
                found.append(Named(where, tuple(words[:-1] if fragment else words), whole=False))
    return found


class _ParserCaptured(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


def run_with_help(start, argv0: str) -> tuple[str, argparse.ArgumentParser | None]:
    """Run ``start()`` with ``--help`` as the command line's arguments (``sys.argv``), as a user would: what
    it printed, then the parser whose help it printed (None when it printed no argparse help). The
    environment, ``sys.path`` and ``sys.argv`` are restored (scripts/train.py points $HF_S2S_DATA_DIR at the
    shared corpus)."""

    def capture(parser, file=None):
        raise _ParserCaptured(parser)

    printed = io.StringIO()
    with mock.patch.dict(os.environ), mock.patch.object(sys, "path", list(sys.path)), \
            mock.patch.object(sys, "argv", [argv0, "--help"]):
        with contextlib.redirect_stdout(printed), pytest.raises(SystemExit) as exited:
            start()
        assert exited.value.code in (0, None), f"{argv0} --help exited with {exited.value.code}"
        with mock.patch.object(argparse.ArgumentParser, "print_help", capture):
            try:
                start()
            except _ParserCaptured as captured:
                return printed.getvalue(), captured.parser
            except SystemExit:  # its help is not argparse's
                pass
    return printed.getvalue(), None


@functools.cache
def program_parser(program: tuple[str, ...]) -> argparse.ArgumentParser | None:
    """The parser of one of hf_s2s's programs: ("hf-s2s", COMMAND) or ("scripts/NAME.py",), after checking
    that it runs with --help and prints its usage (for ("hf-s2s",) alone, that only)."""
    if program == ("hf-s2s",):
        printed, _ = run_with_help(lambda: sys.exit(hf_s2s_main(sys.argv[1:])), "hf-s2s")
        assert printed.startswith("usage: hf-s2s COMMAND"), printed[:300]
        return None
    if program[0] == "hf-s2s":
        assert program[1] in COMMANDS, f"hf-s2s has no command {program[1]!r}; it has {', '.join(COMMANDS)}"
        printed, _ = run_with_help(lambda: sys.exit(hf_s2s_main([program[1], *sys.argv[1:]])), "hf-s2s")
        assert printed.startswith(f"usage: hf-s2s {program[1]} "), printed[:300]
        return command_parser(program[1])
    script = ROOT / program[0]
    assert script.is_file(), f"{program[0]} does not exist"
    printed, parser = run_with_help(lambda: run_script(script), str(script))
    assert printed.startswith("usage:") and parser is not None, \
        f"{program[0]} --help printed {printed[:300]!r}"
    return parser


def run_script(script: Path) -> None:
    """``script`` run as ``python script`` runs it: with its own folder first on sys.path (scripts/toolkit_fixtures/
    make.py imports its sibling modules)."""
    sys.path.insert(0, str(script.parent))
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.path.remove(str(script.parent))


def installed(program: str) -> str | None:
    """Where ``program`` is: beside this Python (its virtual environment's bin/, activated or not), else on
    PATH."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return shutil.which(program, path=path)


def extras() -> set[str]:
    """The extras pyproject.toml declares, as the installed hf_s2s's metadata lists them."""
    return set(importlib.metadata.metadata("hf_s2s").get_all("Provides-Extra"))


def check_named(named: Named) -> None:
    """Raise an AssertionError naming what is wrong with the command ``named``: a program or a flag that does
    not exist, arguments its parser refuses, an extra pyproject.toml does not declare."""
    words = list(named.words)
    program, arguments = words[0], words[1:]
    if program in SHELL or tuple(words[:2]) in PLACEHOLDERS or program in NOT_RUN or \
            (len(words) > 1 and words[1] in NOT_RUN):
        if program.startswith(".ci/"):
            assert os.access(ROOT / program, os.X_OK), f"{program} is not an executable file"
        return
    if program in ("python", "python3") and arguments[:1] == ["-m"]:
        module, arguments = arguments[1], arguments[2:]
        if module != "hf_s2s.cli":
            assert module in PYTHON_MODULES and importlib.util.find_spec(module), f"no module {module} to run"
            return
        program, arguments = "hf-s2s", arguments
    elif program in ("python", "python3"):
        program, arguments = arguments[0], arguments[1:]
        assert program.startswith("scripts/"), f"python {program}: not one of hf_s2s's scripts"
    if program == "accelerate" and arguments[:1] == ["launch"]:
        launch = launch_command_parser()
        parsed = parse(launch, arguments[1:], named)
        if parsed is not None:
            check_named(Named(named.where, ("python", parsed.training_script, *parsed.training_script_args),
                              named.whole))
        return
    if program == "pip":
        for spec in arguments:
            declared = re.fullmatch(r"(?:\.|hf_s2s)\[([\w,-]+)\]", spec)
            if declared:
                missing = set(declared.group(1).split(",")) - extras()
                assert not missing, f"pip install {spec}: pyproject.toml declares no extra {sorted(missing)}"
        return
    if program in OTHER_PROGRAMS:
        assert installed(program), f"{program} is not installed beside this Python, nor on PATH"
        return
    if program == "hf-s2s" and not arguments:
        program_parser(("hf-s2s",))
        return
    if program == "hf-s2s":
        parser, arguments = program_parser((program, arguments[0])), arguments[1:]
    elif "*" in program:
        assert list(ROOT.glob(program)), f"{program} matches no file"
        return
    elif program.endswith(".py"):
        parser = program_parser((program,))
    else:  # a shell script of scripts/: its own --help is run by the slow test
        assert os.access(ROOT / program, os.X_OK), f"{program} is not an executable file"
        return
    parse(parser, arguments, named)


def parse(parser: argparse.ArgumentParser, arguments: list[str], named: Named):
    """``arguments`` parsed by ``parser`` when ``named`` is whole (the namespace); for a fragment, each of its
    flags must be one the parser knows (None)."""
    if not named.whole:
        unknown = [word for word in arguments if word.startswith("--")
                   and word.split("=")[0] not in parser._option_string_actions]
        assert not unknown, f"{parser.prog} has no {', '.join(unknown)}"
        return None
    refused = io.StringIO()
    try:
        with contextlib.redirect_stderr(refused):
            return parser.parse_args(arguments)
    except SystemExit:
        refusal = refused.getvalue().strip().splitlines()[-1]  # argparse's "prog: error: ..." after the usage
        raise AssertionError(f"{parser.prog} refuses these arguments: {refusal}") from None


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_a_page_names_runs_and_its_flags_exist(page):
    problems = []
    for named in named_commands(page):
        try:
            check_named(named)
        except AssertionError as error:
            problems.append(f"{named}\n    {str(error).splitlines()[0]}")
    assert not problems, f"{len(problems)} command(s) that do not run as written:\n" + "\n".join(problems)


def help_command(named: Named) -> list[str] | None:
    """How the slow test runs a command the docs name in a process of its own: the program (with its
    subcommand) and --help. None for hf_s2s's own Python programs, which the test above runs with --help, for
    what the shell runs itself and for NOT_RUN."""
    words = list(named.words)
    if words[0] in ("python", "python3") and words[1:2] == ["-m"] and words[2] != "hf_s2s.cli":
        return [sys.executable, "-m", words[2], "--help"]
    if words[0] in OTHER_PROGRAMS and words[0] not in NOT_RUN:
        levels = SUBCOMMAND_LEVELS[words[0]]
        subcommand = list(itertools.takewhile(lambda word: re.fullmatch(r"[a-z]+", word),
                                              words[1:1 + levels]))
        return [installed(words[0]) or words[0], *subcommand, "--help"]
    if words[0].startswith("scripts/") and not words[0].endswith(".py"):
        return [str(ROOT / words[0]), "--help"]
    return None


def quickstart() -> str:
    """The README's Python quickstart, as written."""
    blocks = FENCE.findall((ROOT / "README.md").read_text(encoding="utf-8"))
    return next(code for language, code in blocks if language == "python")


@pytest.mark.slow
def test_the_other_programs_the_docs_name_run_in_their_own_process():
    """Each program the docs name that is not hf_s2s's own Python code (pytest, venv, pip, accelerate, mkdocs,
    sacrebleu, hf, scripts/decoding_study.sh) runs with --help in a process of its own, and so do the
    installed hf-s2s command and one of its subcommands (the others run in-process above)."""
    commands = {tuple(command) for page in MARKDOWN for named in named_commands(page)
                if (command := help_command(named)) is not None}
    assert any("accelerate" in command[0] for command in commands)  # the collection found the programs
    commands |= {(installed("hf-s2s"), "--help"), (installed("hf-s2s"), "translate", "--help")}
    failed = []
    for command in sorted(commands):
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
        if done.returncode != 0 or "usage" not in (done.stdout + done.stderr).lower():
            printed = (done.stderr or done.stdout)[-500:]
            failed.append(f"{shlex.join(command)}: exit {done.returncode}\n{printed}")
    assert not failed, "\n".join(failed)


@pytest.mark.slow
def test_the_readme_quickstart_runs_as_written_and_writes_only_under_runs(tmp_path):
    """The README's Python quickstart, run in a fresh folder as a user pastes it, generates, and writes only
    under runs/, which git ignores (a clone's `git status` stays clean)."""
    (tmp_path / "quickstart.py").write_text(quickstart())
    done = subprocess.run([sys.executable, "quickstart.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("tensor([[")  # the generated ids
    assert sorted(path.name for path in tmp_path.iterdir()) == ["quickstart.py", "runs"]
    assert (tmp_path / "runs" / "my-model" / "config.json").is_file()
    assert "runs/" in (ROOT / ".gitignore").read_text().splitlines()
