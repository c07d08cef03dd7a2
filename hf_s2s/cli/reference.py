"""The two reference pages of the documentation, generated from the code so that they cannot drift from it:
``docs/cli.md`` from the argument parser of each ``hf-s2s`` command, ``docs/configuration.md`` from the fields of
the two configuration classes.

``scripts/gen_docs_reference.py`` writes them; ``tests/test_docs.py`` regenerates them into a temporary folder and
fails when a committed page differs, so a flag or a config field changed without regenerating is caught.

The CLI page renders the parser that ``hf-s2s COMMAND --help`` prints, taken at the moment it would print (every
flag, default and help text is the command's own), as tables rather than argparse's text, whose layout depends on
the terminal width and the Python version. Defaults are those of a machine without an accelerator: the training job
turns on pinned memory and bf16 / fp16 where there is one, and a page must not depend on where it was generated.

The configuration page reads each config class's source: one row per annotated field, with its type, its default
and the comment on its line (comment-only lines directly below continue that comment).
"""

import argparse
import ast
import dataclasses
import html
import importlib
import inspect
import io
import re
import textwrap
import tokenize
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import torch

from ..models.configuration_rnn_seq2seq import RNNSeq2SeqConfig
from ..models.configuration_transformer_seq2seq import TransformerSeq2SeqConfig
from . import COMMANDS

CONFIG_CLASSES = (RNNSeq2SeqConfig, TransformerSeq2SeqConfig)
REGENERATE = "python scripts/gen_docs_reference.py"
PAGES = ("cli.md", "configuration.md")


# ------------------------------------------------------------------------------------------------------------
# Markdown helpers
# ------------------------------------------------------------------------------------------------------------


def cell(text: str) -> str:
    """Plain text made safe for a markdown table cell: no row break, no column break, no HTML (``</s>`` appears
    in help texts), no emphasis (``length ** PENALTY``)."""
    text = " ".join(str(text).split())
    for raw, escaped in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "\\|"), ("*", "\\*")):
        text = text.replace(raw, escaped)
    return text


def code(text: str) -> str:
    """``text`` as an inline code span (empty text stays empty). A ``|`` (``int | None``) would end a table cell on
    GitHub, and an escaped ``\\|`` shows its backslash in mkdocs, so such a span is written as HTML."""
    text = str(text)
    if not text:
        return ""
    if "|" in text:
        return "<code>" + html.escape(text).replace("|", "&#124;") + "</code>"
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def rst_to_markdown(text: str) -> str:
    """Docstring markup to markdown: ``x`` is `x` in markdown."""
    return text.replace("``", "`")


def header(sources: str) -> list[str]:
    return [f"<!-- Generated from {sources} by `{REGENERATE}`: edit the code, then regenerate. "
            "tests/test_docs.py fails while this page is stale. -->", ""]


# ------------------------------------------------------------------------------------------------------------
# docs/cli.md
# ------------------------------------------------------------------------------------------------------------


class _ParserCaptured(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


def command_parser(name: str, gpu: bool = False) -> argparse.ArgumentParser:
    """The parser ``hf-s2s NAME --help`` prints, with the defaults of a machine without an accelerator (or, with
    ``gpu``, of one with a bf16-capable GPU)."""
    module = importlib.import_module(f"hf_s2s.cli.{COMMANDS[name][0]}")

    def capture(parser, file=None):
        raise _ParserCaptured(parser)

    with mock.patch.object(argparse.ArgumentParser, "print_help", capture), \
            mock.patch.object(torch.cuda, "is_available", return_value=gpu), \
            mock.patch.object(torch.cuda, "is_bf16_supported", return_value=gpu), \
            mock.patch.object(torch.accelerator, "is_available", return_value=gpu):
        try:
            module.main(["--help"], prog=f"hf-s2s {name}")
        except _ParserCaptured as captured:
            return captured.parser
    raise RuntimeError(f"hf-s2s {name} --help printed no argparse help")


def option_strings(action: argparse.Action) -> list[str]:
    """The action's flags without the dashed aliases ``HfArgumentParser`` adds (``--model-type`` beside
    ``--model_type``)."""
    names = action.option_strings
    return [n for n in names if not ("-" in n[2:] and n[:2] + n[2:].replace("-", "_") in names)]


def invocation(action: argparse.Action) -> str:
    """How the argument is written, as argparse's help writes it: ``--beams BEAMS``, ``model [model ...]``."""
    flags = ", ".join(option_strings(action))
    if action.option_strings and action.nargs == 0:
        return flags
    if action.metavar is not None:
        value = action.metavar
    elif action.choices is not None:
        value = "{" + ",".join(map(str, action.choices)) + "}"
    else:
        value = action.dest.upper() if action.option_strings else action.dest
    values = {None: value, "?": f"[{value}]", "*": f"[{value} ...]", "+": f"{value} [{value} ...]"}.get(
        action.nargs, " ".join([value] * action.nargs) if isinstance(action.nargs, int) else value)
    return f"{flags} {values}" if flags else values


def expanded_help(action: argparse.Action, prog: str) -> str:
    """The help text with argparse's ``%(default)s``-style fields filled in, as ``--help`` prints it."""
    if not action.help:
        return ""
    if "%" not in action.help:
        return action.help
    params = {key: value for key, value in vars(action).items() if value is not argparse.SUPPRESS}
    params["prog"] = prog
    if params.get("choices") is not None:
        params["choices"] = ", ".join(map(str, params["choices"]))
    return action.help % params


def default_text(default) -> str:
    if default is None or default is argparse.SUPPRESS:
        return ""  # not set
    if isinstance(default, list | tuple):
        return code(" ".join(map(str, default)))
    return code(default)


def shown_default(action: argparse.Action) -> str:
    """The default as the ``hf-s2s`` help formatter shows it: none for a required argument or where the help text
    already says what the default is; blank for None (the flag is not set)."""
    if action.required or not action.option_strings or "default" in (action.help or ""):
        return ""
    return default_text(action.default)


def documented_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The arguments ``--help`` lists, in its order, without ``--help`` itself (argparse has no public accessor)."""
    return [action for action in parser._actions
            if action.help is not argparse.SUPPRESS and not isinstance(action, argparse._HelpAction)]


def flag_table(actions: list[argparse.Action], prog: str) -> list[str]:
    lines = ["| argument | default | what it does |", "| --- | --- | --- |"]
    for action in actions:
        help_text = cell(expanded_help(action, prog))
        lines.append(f"| {code(invocation(action))} | {shown_default(action)} | {help_text} |")
    return lines


def dataclass_sections(name: str, parser, prog: str) -> list[str]:
    """A parser built from dataclasses (``HfArgumentParser``, the train command): hf_s2s's own arguments in full,
    and of transformers' arguments only those whose default the command changes (the others are transformers'
    own, differ between its releases, and ``--help`` lists them all)."""
    actions = documented_actions(parser)
    lines = []
    own = set()
    for dataclass_type in parser.dataclass_types:
        if dataclass_type.__module__.split(".")[0] != "hf_s2s":
            continue
        # hf_s2s's own fields: not those a subclass inherits from transformers' Seq2SeqTrainingArguments
        inherited = {f.name for base in dataclass_type.__mro__[1:] if dataclasses.is_dataclass(base)
                     and base.__module__.split(".")[0] != "hf_s2s" for f in dataclasses.fields(base)}
        names = {f.name for f in dataclasses.fields(dataclass_type)} - inherited
        own |= names
        lines += ["", f"**{dataclass_type.__name__}** (hf_s2s)", ""]
        lines += flag_table([a for a in actions if a.dest in names], prog)
    # the same dataclasses without the command's set_defaults: what transformers itself defaults to
    plain = type(parser)(parser.dataclass_types)
    on_gpu = command_parser(name, gpu=True)
    first_action = {}
    for action in actions:
        first_action.setdefault(action.dest, action)
    def differs(dest: str) -> bool:
        transformers_default = plain.get_default(dest)
        return parser.get_default(dest) != transformers_default or on_gpu.get_default(dest) != transformers_default

    changed = [action for dest, action in first_action.items() if dest not in own and differs(dest)]
    if changed:
        lines += ["", "**Seq2SeqTrainingArguments** (transformers): every one of its flags is accepted "
                      "(`--help` lists them); these have another default here", "",
                  "| argument | default here, without a GPU | with a (bf16-capable) GPU |", "| --- | --- | --- |"]
        for action in changed:
            here, gpu = parser.get_default(action.dest), on_gpu.get_default(action.dest)
            lines.append(f"| {code(', '.join(option_strings(action)))} | {default_text(here)} | "
                         f"{default_text(gpu) if gpu != here else 'the same'} |")
    return lines


def cli_page() -> str:
    lines = ["# Command line reference", ""]
    lines += header("the argument parser of each `hf-s2s` command (`hf_s2s/cli/`)")
    lines += [
        "Installed hf_s2s has one command, `hf-s2s`, with a subcommand per tool; `python scripts/NAME.py` in a "
        "checkout runs the same code. `hf-s2s COMMAND --help` prints what this page shows, in argparse's layout. "
        "Defaults are those of a machine without a GPU.",
        "",
        "| command | what it does | in a checkout |",
        "| --- | --- | --- |",
    ]
    for name, (module, summary) in COMMANDS.items():
        anchor = "hf-s2s-" + name
        lines.append(f"| [`hf-s2s {name}`](#{anchor}) | {cell(summary)} | `python scripts/{module}.py` |")
    for name, (_, summary) in COMMANDS.items():
        prog = f"hf-s2s {name}"
        parser = command_parser(name)
        lines += ["", f"## {prog}", "", cell(summary[0].upper() + summary[1:]) + "."]
        if parser.description:
            lines += ["", "```text", textwrap.dedent(parser.description).strip("\n"), "```"]
        if hasattr(parser, "dataclass_types"):
            lines += dataclass_sections(name, parser, prog)
        else:
            lines += [""] + flag_table(documented_actions(parser), prog)
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------------------
# docs/configuration.md
# ------------------------------------------------------------------------------------------------------------


@dataclass
class ConfigField:
    name: str
    annotation: str
    default: str  # as written in the source
    comment: str  # the field's comment, continuation lines joined


def config_fields(config_class: type) -> list[ConfigField]:
    """The fields a config class declares itself (annotated assignments in its body), in source order."""
    source = textwrap.dedent(inspect.getsource(config_class))
    class_def = ast.parse(source).body[0]
    lines = source.splitlines()
    comments = {token.start[0]: token.string.lstrip("#").strip()
                for token in tokenize.generate_tokens(io.StringIO(source).readline)
                if token.type == tokenize.COMMENT}
    declared = {f.name for f in dataclasses.fields(config_class)}
    found = []
    for node in class_def.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        if node.target.id not in declared:
            raise ValueError(f"{config_class.__name__}.{node.target.id} is annotated but not a config field")
        parts = [comments[node.end_lineno]] if node.end_lineno in comments else []
        line = node.end_lineno + 1
        while parts and line in comments and lines[line - 1].lstrip().startswith("#"):
            parts.append(comments[line])
            line += 1
        default = ast.get_source_segment(source, node.value) if node.value is not None else ""
        found.append(ConfigField(node.target.id, ast.get_source_segment(source, node.annotation), default,
                                 " ".join(parts)))
    return found


def named_constants(config_class: type, texts: list[str]) -> dict[str, tuple]:
    """Module-level tuples of strings that ``texts`` name (``one of ATTENTION_TYPES``), with their values."""
    module = inspect.getmodule(config_class)
    names = dict.fromkeys(name for text in texts for name in re.findall(r"\b[A-Z][A-Z0-9_]{2,}\b", text))
    values = {name: getattr(module, name, None) for name in names}
    return {name: value for name, value in values.items()
            if isinstance(value, tuple) and all(isinstance(v, str) for v in value)}


def docstring_markdown(config_class: type) -> str:
    """The class docstring up to its example, in markdown."""
    text = inspect.cleandoc(config_class.__doc__ or "")
    text = re.split(r"^Examples?:\s*$", text, flags=re.MULTILINE)[0].strip()
    return rst_to_markdown(text)


def configuration_page() -> str:
    sources = ", ".join(f"`{inspect.getmodule(c).__name__.replace('.', '/')}.py`" for c in CONFIG_CLASSES)
    lines = ["# Configuration reference", ""]
    lines += header(sources)
    lines += [
        "Every field of the two configuration classes, with the default and the comment it has in the code. A "
        "config is built with keywords (`AutoConfig.for_model(\"rnn_seq2seq\", cell_type=\"lstm\")`, or "
        "`--model_config '{\"cell_type\": \"lstm\"}'` in `hf-s2s train`); a misspelled keyword or a value out of "
        "range is a `ValueError` that names the field. The fields transformers' `PreTrainedConfig` adds are not "
        "listed.",
    ]
    for config_class in CONFIG_CLASSES:
        fields = config_fields(config_class)
        path = inspect.getmodule(config_class).__name__.replace(".", "/") + ".py"
        lines += ["", f"## {config_class.__name__}", "",
                  f"`model_type` {code(repr(config_class.model_type))}, defined in `{path}`.", ""]
        lines += [docstring_markdown(config_class), ""]
        lines += ["| field | type | default | what it is |", "| --- | --- | --- | --- |"]
        lines += [f"| `{f.name}` | {code(f.annotation)} | {code(f.default)} | {cell(f.comment)} |" for f in fields]
        constants = named_constants(config_class, [f.comment for f in fields])
        if constants:
            lines += ["", "Names used above:", ""]
            lines += [f"- `{name}`: " + ", ".join(code(repr(v)) for v in values)
                      for name, values in constants.items()]
        aliases = getattr(config_class, "attribute_map", {})
        if aliases:
            lines += ["", "Generic names transformers reads, and the field each one is: "
                      + ", ".join(f"`{alias}` = `{field}`" for alias, field in aliases.items()) + "."]
    return "\n".join(lines) + "\n"


def write_pages(output_dir: str | Path) -> list[Path]:
    """Write cli.md and configuration.md into ``output_dir``; returns their paths."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, page in (("cli.md", cli_page()), ("configuration.md", configuration_page())):
        path = output_dir / name
        path.write_text(page, encoding="utf-8")
        written.append(path)
    return written
