"""The layout the package and its tests keep, read from the source with ``ast`` (nothing is imported):

- hf_s2s's sub-packages stand on floors (``FLOORS``), and a module imports only from its own sub-package and from
  lower floors; ``metrics`` imports nothing of hf_s2s;
- no module imports hf_s2s inside a function: a function-local import is how an import cycle is dodged, and the
  cycle says a module sits on the wrong floor;
- test modules import shared helpers one way (``from tests.helpers import ...``) and never another test module;
- every test file keeps at least one test out of the slow tier, so ``pytest -m "not slow"`` touches every module.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hf_s2s"
TESTS = ROOT / "tests"

# The floors, lowest first. A module imports from its own sub-package and from lower floors only, so sub-packages
# on one floor do not import each other.
FLOORS = (
    ("models",),  # what a saved folder ships (flat: single-dot relative imports), and the family registry
    ("data",),  # corpora, tokenizers, samplers
    ("metrics",),  # BLEU and chrF: a leaf (imports no hf_s2s) for anything above data
    ("inference", "importers"),  # decoding, ensembles, int8, export; other toolkits' checkpoints converted
    ("hub", "serving"),  # the model card and pushing; the HTTP server
    ("training",),
    ("benchmark",),  # hf_s2s against its peers, timed
    ("cli",),  # the hf-s2s commands, bench among them
)
LEAVES = ("metrics",)
# hf_s2s/__init__.py re-exports the models and inference's int8 and analysis: importing the package itself
# (``import hf_s2s``, ``from hf_s2s import X``) stands on this floor.
PACKAGE_FLOOR = "inference"
FLOOR = {name: level for level, names in enumerate(FLOORS) for name in names}

# Imports that break the rules today, each with why it is there; the test fails on any other, and on an entry
# here whose module no longer has it (so the list only shrinks). Keys: (module path, imported module).
KNOWN_OFFENDERS = {
    # the serve extra (FastAPI, uvicorn) is imported only once `hf-s2s serve` has checked it is installed
    ("hf_s2s/cli/serve.py", "hf_s2s.serving.app"): "function-local",
    ("hf_s2s/cli/serve.py", "hf_s2s.serving.server"): "function-local",
    # the same extra for the serving section of the benchmark, imported once the section has checked it is there
    ("hf_s2s/benchmark/serving.py", "hf_s2s.serving.app"): "function-local",
    ("hf_s2s/benchmark/serving.py", "hf_s2s.serving.server"): "function-local",
}


def package_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def suite_files() -> list[Path]:
    return sorted(TESTS.glob("test_*.py"))


def imports(tree: ast.Module):
    """(node, inside a function) for every import statement of the module."""
    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_function
            yield from walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))
    yield from walk(tree, False)


def imported_modules(node, path: Path) -> list[str]:
    """The absolute hf_s2s module names an import statement of ``path`` reads (empty for other packages).
    ``from hf_s2s import data`` reads the sub-package; ``from hf_s2s import FAMILIES`` reads the package."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.split(".")[0] == "hf_s2s"]
    if node.level:
        package = list(path.relative_to(ROOT).with_suffix("").parts[:-1])  # a module's package, or __init__'s own
        base = package[: len(package) - node.level + 1]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    if module.split(".")[0] != "hf_s2s":
        return []
    if module == "hf_s2s":  # a sub-package by name, or the package's own names
        return [f"hf_s2s.{alias.name}" if alias.name in FLOOR else "hf_s2s" for alias in node.names]
    if node.module is None:  # from . import synthetic: modules of the package
        return [f"{module}.{alias.name}" for alias in node.names]
    return [module]


def floor_of(module: str) -> str:
    """The floor an absolute module name stands on: its sub-package, or PACKAGE_FLOOR for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else PACKAGE_FLOOR


def layering_problems() -> dict[tuple[str, str], str]:
    problems = {}
    for path in package_modules():
        relative = path.relative_to(ROOT)
        own = relative.parts[1] if len(relative.parts) > 2 else PACKAGE_FLOOR  # hf_s2s/__init__.py: the package
        if len(relative.parts) == 2 and path.name != "__init__.py":
            problems[(str(relative), "")] = "a module outside the sub-packages: put it in the one it belongs to"
            continue
        if own not in FLOOR:
            problems[(str(relative), "")] = f"sub-package {own!r} is on no floor: add it to FLOORS"
            continue
        for node, in_function in imports(ast.parse(path.read_text(), filename=str(path))):
            for module in imported_modules(node, path):
                target = floor_of(module)
                key = (str(relative), module)
                if in_function:
                    problems[key] = "function-local"
                elif own in LEAVES and target != own:
                    problems[key] = f"{own} is a leaf: it imports nothing of hf_s2s"
                elif target in LEAVES and FLOOR[own] <= FLOOR["data"]:
                    problems[key] = f"{target} is for floors above data, not {own}"
                elif target not in FLOOR:
                    problems[key] = f"imports a sub-package on no floor ({target})"
                elif target != own and FLOOR[target] >= FLOOR[own]:
                    problems[key] = f"{own} imports {target}, which is not on a lower floor"
    return problems


def test_the_package_imports_point_down_only_and_never_from_a_function():
    problems = layering_problems()
    new = {key: why for key, why in problems.items() if key not in KNOWN_OFFENDERS}
    assert not new, "\n".join(f"{path}: {module or '-'}: {why}" for (path, module), why in sorted(new.items()))
    gone = sorted(key for key in set(KNOWN_OFFENDERS) - set(problems) if (ROOT / key[0]).exists())
    assert not gone, f"fixed, so remove them from KNOWN_OFFENDERS: {gone}"


def test_the_layering_check_sees_an_upward_and_a_function_local_import(tmp_path, monkeypatch):
    """The check above has teeth: a models module importing training, and a data module importing inside a
    function, are both reported."""
    package = tmp_path / "hf_s2s"
    for folder in ("models", "data"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("from .models import x\n")
    (package / "models" / "x.py").write_text("from ..training.run import run\n")
    (package / "data" / "y.py").write_text("def load():\n    from . import synthetic\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    monkeypatch.setitem(globals(), "PACKAGE", package)
    assert layering_problems() == {
        ("hf_s2s/models/x.py", "hf_s2s.training.run"): "models imports training, which is not on a lower floor",
        ("hf_s2s/data/y.py", "hf_s2s.data.synthetic"): "function-local",
    }


# ---------------------------------------------------------------------------------------------------- the tests


def test_modules_import_helpers_from_tests_and_never_another_test_module():
    """Shared helpers live in tests/helpers.py, runs.py, syncs.py, ...: imported as ``tests.X``, never bare (the
    same module under two names is two modules), and no test module imports another (pytest would collect its
    tests twice, or they would run in the wrong file)."""
    local = {path.stem for path in TESTS.glob("*.py")}
    problems = []
    for path in suite_files():
        for node, _ in imports(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if node.module else [alias.name for alias in node.names]
                names = [f"{'.' * node.level}{name}" for name in names]
                if node.module == "tests":  # from tests import helpers
                    names = [f"tests.{alias.name}" for alias in node.names]
            else:
                names = [alias.name for alias in node.names]
            for name in names:
                top, last = name.lstrip(".").split(".")[0], name.split(".")[-1]
                if name.startswith(".") or top in local:
                    problems.append(f"{path.name}:{node.lineno}: {name} (import it as tests.{name.lstrip('.')})")
                elif top == "tests" and last.startswith("test_"):
                    problems.append(f"{path.name}:{node.lineno}: {name} is a test module")
    assert not problems, "\n".join(problems)


def is_slow(decorators) -> bool:
    return any(ast.unparse(d).endswith("mark.slow") for d in decorators)


def test_every_test_file_keeps_a_test_out_of_the_slow_tier():
    all_slow = []
    for path in suite_files():
        tree = ast.parse(path.read_text(), filename=str(path))
        module_marks = [ast.unparse(n.value) for n in tree.body if isinstance(n, ast.Assign)
                        and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets)]
        if any("mark.slow" in marks for marks in module_marks):
            all_slow.append(path.name)
            continue
        functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
        if functions and all(is_slow(f.decorator_list) for f in functions):
            all_slow.append(path.name)
    assert not all_slow, f"every test of these files is marked slow: {all_slow}"


@pytest.mark.parametrize("line", ["from helpers import TINY", "import test_hub", "from tests.test_hub import x",
                                  "from tests import test_hub", "from .helpers import TINY"])
def test_the_import_check_sees_each_wrong_import(line, tmp_path, monkeypatch):
    (tmp_path / "helpers.py").write_text("")
    (tmp_path / "test_hub.py").write_text("")
    (tmp_path / "test_bad.py").write_text(f"{line}\n")
    monkeypatch.setitem(globals(), "TESTS", tmp_path)
    with pytest.raises(AssertionError, match="test_bad.py:1"):
        test_modules_import_helpers_from_tests_and_never_another_test_module()
