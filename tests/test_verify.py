"""Code integrity (hf_s2s.hub.code_integrity) and `hf-s2s verify`: the manifest records this checkout's code for the
current release (the staleness test below fails until it is regenerated), holds every code file a saved folder can
ship, and names the release a folder's code is byte for byte; anything else (a changed comment, an extra file,
compiled or pickled files, code loaded from another repository) is listed, on real saved folders."""

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import hf_s2s
from hf_s2s.cli import run_command
from hf_s2s.data.tokenization import TranslationTokenizers
from hf_s2s.hub import code_integrity
from hf_s2s.hub.code_integrity import (
    MANIFEST_PATH,
    MAX_FOLDER_DEPTH,
    REGENERATE,
    SHIPPED_CODE_FILES,
    code_diff,
    code_files_in,
    compare_with_releases,
    load_manifest,
    manifest_problems,
    package_code_hashes,
    verify_folder,
    write_manifest,
)
from hf_s2s.hub.publish import HubFolderError, build_hub_folder, check_hub_folder
from hf_s2s.models.families import FAMILIES
from hf_s2s.training.run import parse_args, run
from tests.helpers import run_without_hf_s2s
from tests.runs import train_args
from tests.saved_folders import save_tiny_model_folder, tiny_tokenizer

ROOT = Path(__file__).resolve().parent.parent
VERSION = hf_s2s.__version__
CARD = "---\nlicense: apache-2.0\nlibrary_name: transformers\ntags: [translation]\n---\nA tiny test model.\n"


@pytest.fixture(scope="module")
def hub_folders(tmp_path_factory):
    """The Hub folder of a random tiny model of each family, as push-to-hub --dry-run builds it."""
    folders = {}
    for model_type in FAMILIES:
        root = tmp_path_factory.mktemp(model_type)
        model_dir = save_tiny_model_folder(root / "model", model_type)
        (model_dir / "README.md").write_text(CARD)
        folders[model_type] = build_hub_folder(model_dir, root / "hub")
    return folders


def copy_folder(hub_folders, tmp_path, model_type="rnn_seq2seq") -> Path:
    return shutil.copytree(hub_folders[model_type], tmp_path / "folder")


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def verify(folder, *flags, capsys) -> tuple[int, str]:
    status = run_command("verify", [str(folder), *flags])
    return status, capsys.readouterr().out


# ------------------------------------------------------------------------------------------------- manifest


def test_manifest_records_this_checkouts_code_for_the_current_release():
    """The staleness test: it fails as soon as a shipped code file changes without the manifest, and says how to
    regenerate it."""
    problems = manifest_problems()
    assert not problems, "\n".join(problems)


def test_manifest_holds_every_code_file_a_saved_folder_can_ship(hub_folders, tmp_path):
    shipped = {name for folder in hub_folders.values() for name in code_integrity.code_files_in(folder)}
    # a separate-vocabulary tokenizer ships its own code beside either family's
    TranslationTokenizers(tiny_tokenizer(), tiny_tokenizer()).save_pretrained(tmp_path / "tokenizer")
    shipped |= set(code_integrity.code_files_in(tmp_path / "tokenizer"))
    assert shipped == set(SHIPPED_CODE_FILES) == set(load_manifest()[VERSION])
    for model_type, folder in hub_folders.items():
        assert set(code_integrity.code_files_in(folder)) == set(FAMILIES[model_type].code_files)


@pytest.fixture
def package_copy(tmp_path):
    """A copy of the shipped code files and of the manifest, to make stale."""
    package = tmp_path / "package"
    package.mkdir()
    for name in SHIPPED_CODE_FILES:
        shutil.copyfile(code_integrity.PACKAGE_DIR / name, package / name)
    return package, Path(shutil.copyfile(MANIFEST_PATH, tmp_path / "code_manifest.json"))


def test_a_stale_manifest_fails_the_staleness_check_and_says_how_to_regenerate(package_copy):
    package, manifest = package_copy
    assert manifest_problems(manifest, package) == []
    append(package / "modeling_common.py", "# a comment is a change too\n")
    (problem,) = manifest_problems(manifest, package)
    assert "modeling_common.py differs" in problem and f"`{REGENERATE}`" in problem
    assert f"if {VERSION} is already released, raise the version in hf_s2s/models/version.py first" in problem
    (problem,) = manifest_problems(manifest, package, version="9.0.0")
    assert "it has no entry for 9.0.0" in problem and f"`{REGENERATE}`" in problem


def test_regenerating_records_the_current_release_and_keeps_earlier_ones(package_copy):
    package, manifest = package_copy
    data = json.loads(manifest.read_text())
    data["releases"]["0.1.0"] = {"modeling_common.py": "0" * 64}
    manifest.write_text(json.dumps(data))
    append(package / "modeling_common.py", "# changed\n")
    releases = write_manifest(manifest, package)
    assert manifest_problems(manifest, package) == []
    assert set(releases) == set(data["releases"]) | {VERSION} and list(releases)[-1] == VERSION
    assert releases["0.1.0"] == {"modeling_common.py": "0" * 64}
    assert all(releases[release] == recorded for release, recorded in data["releases"].items() if release != VERSION)
    assert releases[VERSION] == package_code_hashes(package) != package_code_hashes()
    assert json.loads(manifest.read_text())["regenerate"] == REGENERATE


def test_the_manifest_ships_in_the_wheel():
    """What decides it: the manifest is package data (tests/test_package.py installs the wheel)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped_as = MANIFEST_PATH.relative_to(Path(hf_s2s.__file__).parent).as_posix()
    assert shipped_as in package_data["hf_s2s"]


# ------------------------------------------------------------------------------------------- hf-s2s verify


@pytest.mark.parametrize("model_type", list(FAMILIES))
def test_verify_names_the_release_of_an_unmodified_folder(hub_folders, model_type, capsys):
    status, out = verify(hub_folders[model_type], capsys=capsys)
    assert (status, out) == (0, f"unmodified hf_s2s {VERSION} code: {len(FAMILIES[model_type].code_files)} "
                                "files\n")


def test_verify_lists_a_changed_comment_and_unknown_code_and_shows_the_diff(hub_folders, tmp_path, capsys):
    folder = copy_folder(hub_folders, tmp_path)
    append(folder / "modeling_rnn_seq2seq.py", "# reviewed by me\n")
    (folder / "custom_generate").mkdir()
    (folder / "custom_generate" / "generate.py").write_text("def generate(model, **kwargs):\n    return None\n")
    status, out = verify(folder, capsys=capsys)
    assert status == 1
    assert out.splitlines()[:3] == [
        f"{folder} is not an unmodified hf_s2s release (compared with hf_s2s {VERSION}; the installed hf_s2s is "
        f"{VERSION}):",
        f"  modeling_rnn_seq2seq.py differs from hf_s2s {VERSION}'s",
        f"  custom_generate/generate.py is not a file of hf_s2s {VERSION}",
    ]
    assert "+# reviewed by me" not in out  # the diff only when asked for
    status, out = verify(folder, "--diff", capsys=capsys)
    assert status == 1
    assert f"--- hf_s2s {VERSION}/modeling_rnn_seq2seq.py\n+++ {folder}/modeling_rnn_seq2seq.py\n" in out
    assert "\n+# reviewed by me\n" in out
    assert "--- /dev/null\n+++ " + f"{folder}/custom_generate/generate.py\n@@ -0,0 +1,2 @@\n" in out


def test_verify_names_the_earlier_release_a_folder_is(hub_folders, tmp_path):
    folder = copy_folder(hub_folders, tmp_path)
    append(folder / "modeling_rnn_seq2seq.py", "# as 0.1.0 had it\n")  # a file only the RNN family ships
    manifest = Path(shutil.copyfile(MANIFEST_PATH, tmp_path / "manifest.json"))
    data = json.loads(manifest.read_text())
    data["releases"]["0.1.0"] = {**data["releases"][VERSION],
                                 "modeling_rnn_seq2seq.py": code_integrity.sha256_of(folder / "modeling_rnn_seq2seq.py")}
    manifest.write_text(json.dumps(data))
    report = compare_with_releases(folder, manifest_path=manifest)
    assert report.is_release and report.identical_releases == ["0.1.0"] and report.release == "0.1.0"
    # code that two releases share names both, compared with the newest
    report = compare_with_releases(hub_folders["transformer_seq2seq"], manifest_path=manifest)
    assert report.identical_releases == ["0.1.0", VERSION] and report.release == VERSION
    # code that is no release's is compared with the release config.json says wrote the folder
    append(folder / "version.py", "# mine\n")
    report = compare_with_releases(folder, manifest_path=manifest)
    assert not report.is_release and report.release == VERSION == json.loads(
        (folder / "config.json").read_text())["hf_s2s_version"]
    assert report.modified == ["modeling_rnn_seq2seq.py", "version.py"]


def test_verify_lists_compiled_and_pickled_files_and_code_from_another_repository(hub_folders, tmp_path, capsys):
    folder = copy_folder(hub_folders, tmp_path)
    (folder / "kernels.so").write_bytes(b"\x7fELF")
    (folder / "training_args.bin").write_bytes(b"\x80\x04")
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"]["AutoModel"] = "someone/else--modeling_rnn_seq2seq.RNNSeq2SeqModel"
    (folder / "config.json").write_text(json.dumps(config))
    status, out = verify(folder, capsys=capsys)
    assert status == 1
    assert out.splitlines()[1:4] == [
        "  kernels.so is compiled code (it cannot be compared with a release)",
        "  training_args.bin is a pickle (loading it can run code)",
        "  config.json auto_map AutoModel loads another repository's code "
        "(someone/else--modeling_rnn_seq2seq.RNNSeq2SeqModel)",
    ]


def test_verify_refuses_a_folder_without_code_or_that_does_not_exist(tmp_path, capsys):
    (tmp_path / "weights").mkdir()
    status, out = verify(tmp_path / "weights", capsys=capsys)
    assert status == 1 and f"  {tmp_path / 'weights'} holds no .py files: no hf_s2s code to verify" in out
    with pytest.raises(SystemExit) as refused:
        run_command("verify", [str(tmp_path / "nowhere")])
    assert refused.value.code == f"error: {tmp_path / 'nowhere'} is not a folder"


@pytest.mark.slow
def test_verify_of_a_training_run_names_what_keeps_it_from_sharing_and_the_command_that_stages_one(tmp_path, capsys):
    """The folders hf-s2s train writes (the run's, and its model/) are not folders to share: verify names the
    training state they keep and prints the push-to-hub --dry-run command that stages the folder to share, which,
    run as printed (a repository and a folder filled in), stages one that verify accepts."""
    out_dir = tmp_path / "run"
    run(*parse_args(train_args(out_dir, "--save_strategy", "steps", "--save_steps", "1")))
    stage = ["hf-s2s", "push-to-hub", str(out_dir / "model"), "NAMESPACE/NAME", "--dry-run", "--staging-dir", "DIR"]
    for folder, kept in ((out_dir / "model", "(training_args.bin)"),
                         (out_dir, "(checkpoint-1/optimizer.pt, checkpoint-1/rng_state.pth, checkpoint-1/scheduler.pt, "
                                   "checkpoint-1/trainer_state.json and 2 more)")):
        status, out = verify(folder, capsys=capsys)
        assert status == 1
        assert out.splitlines()[-1] == (
            f"{folder} is a training run's folder, not one to share: it holds the run's own state {kept}, which no "
            f"shared folder holds; verify checks the folder push-to-hub uploads: stage it with `{shlex.join(stage)}` "
            f"(no network), then run `hf-s2s verify DIR`")
    staged = tmp_path / "staged"
    typed = [str(staged) if word == "DIR" else "me/tiny" if word == "NAMESPACE/NAME" else word for word in stage]
    assert run_command(typed[1], typed[2:]) == 0
    capsys.readouterr()
    status, out = verify(staged, capsys=capsys)
    assert (status, out.split(" code: ")[0]) == (0, f"unmodified hf_s2s {VERSION}")


# -------------------------------------------------------- every entry of a folder, as transformers reaches it
# Each kind of entry below hides code from a walk that does not follow it (Path.rglob on Python 3.11 does not descend
# into a symlinked folder) or loads code from outside the folder; the payload leaves a marker file when it runs.

GENERATE = "def generate(model, **kwargs):\n    return None\n"
CONFIG = "from transformers import PretrainedConfig\nclass Evil(PretrainedConfig):\n    model_type = 'rnn_seq2seq'\n"
TOKENIZER = "from transformers import PreTrainedTokenizerFast\nclass Evil(PreTrainedTokenizerFast):\n    pass\n"
PIPELINE = "from transformers import Pipeline\nclass Evil(Pipeline):\n    pass\n"


def payload(marker: Path, definition: str) -> str:
    """Python that leaves ``marker`` when it runs (the proof that transformers ran it), then defines ``definition``."""
    return f"open({str(marker)!r}, 'w').close()\n{definition}"


def set_auto_config(folder: Path, reference: str) -> None:
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"]["AutoConfig"] = reference
    (folder / "config.json").write_text(json.dumps(config))


def custom_generate_linked(folder: Path, outside: Path) -> str:
    """custom_generate/ as a symlink to a folder elsewhere: transformers imports its generate.py on load."""
    (outside / "generate").mkdir()
    (outside / "generate" / "generate.py").write_text(payload(outside / "ran", GENERATE))
    (folder / "custom_generate").symlink_to(outside / "generate", target_is_directory=True)
    return f"custom_generate is a symlink to the folder {outside / 'generate'}: a model folder holds none"


def auto_map_through_a_linked_folder(folder: Path, outside: Path) -> str:
    """An auto_map module in a symlinked subfolder (transformers loads ``lib/evil.py`` for ``lib/evil.Evil``)."""
    (outside / "lib").mkdir()
    (outside / "lib" / "evil.py").write_text(payload(outside / "ran", CONFIG))
    (folder / "lib").symlink_to(outside / "lib", target_is_directory=True)
    set_auto_config(folder, "lib/evil.Evil")
    return "config.json auto_map AutoConfig loads lib/evil.py, which is not a regular file of the folder (lib/evil.Evil)"


def auto_map_by_absolute_path(folder: Path, outside: Path) -> str:
    """An auto_map module named by an absolute path: transformers loads it from there."""
    (outside / "evil.py").write_text(payload(outside / "ran", CONFIG))
    set_auto_config(folder, f"{outside / 'evil'}.Evil")
    return (f"config.json auto_map AutoConfig loads {outside / 'evil.py'}, which is outside the folder "
            f"({outside / 'evil'}.Evil)")


def tokenizer_auto_map_by_absolute_path(folder: Path, outside: Path) -> str:
    """tokenizer_config.json's auto_map: AutoTokenizer loads the module it names, from anywhere."""
    (outside / "tokenizing.py").write_text(payload(outside / "ran", TOKENIZER))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.update(tokenizer_class="Evil", auto_map={"AutoTokenizer": [None, f"{outside / 'tokenizing'}.Evil"]})
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return (f"tokenizer_config.json auto_map AutoTokenizer[1] loads {outside / 'tokenizing.py'}, which is outside "
            "the folder")


def pipeline_by_absolute_path(folder: Path, outside: Path) -> str:
    """config.json's custom_pipelines: pipeline(task, model=folder, trust_remote_code=True) loads its impl."""
    (outside / "piping.py").write_text(payload(outside / "ran", PIPELINE))
    config = json.loads((folder / "config.json").read_text())
    config["custom_pipelines"]["translation"]["impl"] = f"{outside / 'piping'}.Evil"
    (folder / "config.json").write_text(json.dumps(config))
    return f"config.json custom_pipelines translation loads {outside / 'piping.py'}, which is outside the folder"


def broken_link_filled_later(folder: Path, outside: Path) -> str:
    """custom_generate/ linked to a folder that does not exist yet: whoever creates it later decides what runs."""
    (folder / "custom_generate").symlink_to(outside / "later", target_is_directory=True)
    return f"custom_generate is a broken symlink (to {outside / 'later'}): it cannot be verified"


def fill_the_broken_link(outside: Path) -> None:
    (outside / "later").mkdir()
    (outside / "later" / "generate.py").write_text(payload(outside / "ran", GENERATE))


def link_loop(folder: Path, outside: Path) -> str:
    (folder / "again").symlink_to(folder, target_is_directory=True)
    return f"again is a symlink to the folder {folder}: a model folder holds none"


def self_loop(folder: Path, outside: Path) -> str:
    (folder / "modeling_extra.py").symlink_to("modeling_extra.py")
    return "modeling_extra.py is a symlink loop (to modeling_extra.py): it cannot be verified"


def fifo(folder: Path, outside: Path) -> str:
    """A FIFO is never opened: reading it would wait for whoever writes into it."""
    (folder / "custom_generate").mkdir()
    os.mkfifo(folder / "custom_generate" / "generate.py")
    return "custom_generate/generate.py is not a regular file (a FIFO, socket or device): it cannot be verified"


def upper_case_suffix(folder: Path, outside: Path) -> str:
    """A case-insensitive file system (macOS, Windows) opens generate.PY when transformers asks for generate.py."""
    (folder / "custom_generate").mkdir()
    (folder / "custom_generate" / "generate.PY").write_text(GENERATE)
    return f"custom_generate/generate.PY is not a file of hf_s2s {VERSION}"


def another_repository_in_the_preprocessor_config(folder: Path, outside: Path) -> str:
    """auto_map entries live in every config file transformers reads, not only config.json."""
    (folder / "preprocessor_config.json").write_text(json.dumps(
        {"auto_map": {"AutoFeatureExtractor": "someone/else--extraction.Extractor"}}))
    return ("preprocessor_config.json auto_map AutoFeatureExtractor loads another repository's code "
            "(someone/else--extraction.Extractor)")


ENTRY_KINDS = [custom_generate_linked, auto_map_through_a_linked_folder, auto_map_by_absolute_path,
               tokenizer_auto_map_by_absolute_path, pipeline_by_absolute_path, broken_link_filled_later, link_loop, self_loop, fifo, upper_case_suffix,
               another_repository_in_the_preprocessor_config]


@pytest.mark.parametrize("kind", ENTRY_KINDS, ids=lambda kind: kind.__name__)
def test_verify_refuses_every_entry_it_cannot_verify_as_release_code(hub_folders, tmp_path, kind, capsys):
    folder, outside = copy_folder(hub_folders, tmp_path), tmp_path / "outside"
    outside.mkdir()
    expected = kind(folder, outside)
    status, out = verify(folder, capsys=capsys)
    assert status == 1 and out.startswith(f"{folder} is not an unmodified hf_s2s release"), out
    assert any(line.startswith(f"  {expected}") for line in out.splitlines()), out
    assert not (outside / "ran").exists()  # verifying reads; it runs nothing


def remove_nested(top: Path) -> None:
    """Remove ``top``, a chain of folders each holding the next (``d``) and files, deepest first and without recursion:
    shutil.rmtree recurses once per level and stops at Python's recursion limit (about 1,000), and pytest's clean-up
    of old tmp_path folders and the session's (conftest.py) use it."""
    chain = [top]
    while (chain[-1] / "d").is_dir():
        chain.append(chain[-1] / "d")
    for folder in reversed(chain):
        for entry in folder.iterdir():
            entry.unlink()
        folder.rmdir()


@pytest.mark.parametrize("depth", [40, 1200], ids=["beyond-the-bound", "beyond-the-recursion-limit"])
def test_verify_walks_a_deep_folder_to_its_bound_and_refuses_what_lies_deeper(hub_folders, tmp_path, depth, capsys):
    """Code 20 folders down is compared like any other; a folder nested deeper than verify walks is a problem of its
    own, named, and the folder is refused: whatever the depth, one report and exit 1 (before: a RecursionError from
    1,000 levels on)."""
    folder = copy_folder(hub_folders, tmp_path)
    path = folder
    for level in range(1, depth + 1):
        path = path / "d"
        path.mkdir()
        if level == 20:
            (path / "shallow.py").write_text("print('20 folders down')\n")
    (path / "deep.py").write_text("print('deep')\n")
    try:
        status, out = verify(folder, capsys=capsys)
        too_deep = "/".join("d" * (MAX_FOLDER_DEPTH + 1))
        assert status == 1 and out.startswith(f"{folder} is not an unmodified hf_s2s release"), out
        assert f"  {'d/' * 20}shallow.py is not a file of hf_s2s" in out
        assert f"  {too_deep} is a folder nested deeper than the {MAX_FOLDER_DEPTH} levels verify walks: what it holds " \
               "cannot be verified" in out.splitlines(), out
        assert "deep.py" not in out
    finally:
        remove_nested(folder / "d")


def test_push_to_hub_check_refuses_a_linked_folder_and_code_outside_the_folder(hub_folders, tmp_path):
    folder, outside = copy_folder(hub_folders, tmp_path), tmp_path / "outside"
    outside.mkdir()
    linked = custom_generate_linked(folder, outside)
    absolute = auto_map_by_absolute_path(folder, outside)
    with pytest.raises(HubFolderError) as refused:
        check_hub_folder(folder, allow_modified_code=True)  # not code to review: entries no review covers
    assert linked in str(refused.value) and absolute in str(refused.value)


def test_a_symlink_to_a_release_file_is_that_file(hub_folders, tmp_path, capsys):
    """A Hub cache snapshot is a folder of symlinks to blobs elsewhere: its code is what the links lead to."""
    blobs, snapshot = tmp_path / "blobs", tmp_path / "snapshot"
    blobs.mkdir()
    snapshot.mkdir()
    for path in sorted(hub_folders["transformer_seq2seq"].iterdir()):
        shutil.copyfile(path, blobs / code_integrity.sha256_of(path))
        (snapshot / path.name).symlink_to(blobs / code_integrity.sha256_of(path))
    assert verify(snapshot, capsys=capsys)[0] == 0
    (blobs / code_integrity.sha256_of(snapshot / "version.py")).write_text("print('changed')\n")
    status, out = verify(snapshot, capsys=capsys)
    assert status == 1 and f"  version.py differs from hf_s2s {VERSION}'s" in out.splitlines()


@pytest.mark.slow
def test_the_entries_verify_refuses_run_when_the_folder_is_loaded_with_trust_remote_code(hub_folders, tmp_path):
    """The proof that each refused entry matters: loaded with trust_remote_code=True where hf_s2s is not installed
    (the model, the tokenizer, the pipeline, as a downloader would), each payload runs (the broken link once something
    fills it)."""
    loads = {custom_generate_linked: "AutoModelForSeq2SeqLM.from_pretrained",
             auto_map_through_a_linked_folder: "AutoModelForSeq2SeqLM.from_pretrained",
             auto_map_by_absolute_path: "AutoModelForSeq2SeqLM.from_pretrained",
             tokenizer_auto_map_by_absolute_path: "AutoTokenizer.from_pretrained",
             pipeline_by_absolute_path: "translation_pipeline",
             broken_link_filled_later: "AutoModelForSeq2SeqLM.from_pretrained"}
    folders = {}
    for kind, load in loads.items():
        base = tmp_path / kind.__name__
        base.mkdir()
        folder, outside = copy_folder(hub_folders, base), base / "outside"
        outside.mkdir()
        kind(folder, outside)
        assert verify_folder(folder)[1], kind.__name__
        folders[kind.__name__] = (load, str(folder), str(outside / "ran"))
    fill_the_broken_link(tmp_path / "broken_link_filled_later" / "outside")
    ran = run_without_hf_s2s(f"""
        import json, os
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline
        def translation_pipeline(folder, **kwargs):
            return pipeline("translation", model=folder, **kwargs)
        ran = {{}}
        for name, (load, folder, marker) in {folders!r}.items():
            try:
                eval(load)(folder, trust_remote_code=True)
            except Exception:
                pass  # a payload's class is no working one: the load fails after the payload ran
            ran[name] = os.path.exists(marker)
        print(json.dumps(ran))
    """, cwd=tmp_path)
    assert ran == {kind.__name__: True for kind in loads}


@pytest.mark.slow
def test_verify_script_runs_from_a_checkout(hub_folders):
    completed = subprocess.run([sys.executable, str(ROOT / "scripts" / "verify.py"),
                                str(hub_folders["transformer_seq2seq"])], capture_output=True, text=True, timeout=180)
    assert completed.returncode == 0, completed.stderr[-3000:]
    shipped = len(code_files_in(hub_folders["transformer_seq2seq"]))
    assert shipped == len(FAMILIES["transformer_seq2seq"].code_files)
    assert completed.stdout == f"unmodified hf_s2s {VERSION} code: {shipped} files\n"


def test_diff_shows_a_file_in_full_when_the_installed_copy_is_not_the_releases(hub_folders, tmp_path):
    """A modified install holds no copy of the release's file to compare with: the folder's file is shown whole."""
    folder = copy_folder(hub_folders, tmp_path)
    append(folder / "version.py", "# edited\n")
    package = tmp_path / "installed"
    package.mkdir()
    shutil.copyfile(folder / "version.py", package / "version.py")
    diff = code_diff(verify_folder(folder)[0], package_dir=package)
    assert diff.startswith(f"# version.py: the installed hf_s2s does not hold hf_s2s {VERSION}'s copy of it either")
    assert f"--- /dev/null\n+++ {folder}/version.py\n" in diff and '\n+__version__ = "' in diff
