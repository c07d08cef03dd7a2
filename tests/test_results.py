"""Reading a training run's results.json (hf_s2s.hub.results.read_results) for `hf-s2s results-table` and
`hf-s2s make-model-card`: a folder, a missing file, text that is not JSON, a JSON list and an object that is not a
run's results are each one error line naming the file and the problem, never a traceback or a row of None. The file
reads into RunResults and back byte for byte, and a file of an earlier release renders as it did."""

import json
from pathlib import Path

import pytest

import hf_s2s  # noqa: F401
from hf_s2s.cli import run_command
from hf_s2s.hub.card import render_model_card
from hf_s2s.hub.results import RunResults, read_results, results_table, summary_line

RUN = {"model_type": "transformer_seq2seq", "model_config": {}, "recipe": "tiny", "num_parameters": 1000,
       "test": {"greedy": {"bleu": 30.0, "bleu_lowercase": 31.0, "chrf": 50.0}}}


@pytest.fixture
def files(tmp_path):
    """A run folder as training leaves it (results.json beside model/results.json), and broken results files."""
    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    for path in (run / "results.json", run / "model" / "results.json"):
        path.write_text(json.dumps(RUN))
    (tmp_path / "empty_folder").mkdir()
    (tmp_path / "truncated.json").write_text(json.dumps(RUN)[:40])
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "empty.json").write_text("{}")
    return tmp_path


def test_a_run_folder_is_named_with_the_results_files_it_holds(files):
    run = files / "run"
    with pytest.raises(ValueError, match=f"{run} is a folder, not a results file: give {run / 'results.json'} or "
                                         f"{run / 'model' / 'results.json'}$"):
        read_results(run)
    with pytest.raises(ValueError, match=f"give {files / 'empty_folder' / 'results.json'} or .*none is there"):
        read_results(files / "empty_folder")
    assert read_results(run / "results.json", required=("model_type", "test")) == RunResults.from_dict(RUN)


@pytest.mark.parametrize(("name", "message"), [
    ("truncated.json", "{path} is not valid JSON (Unterminated string"),
    ("list.json", "{path} holds a JSON list, not the object a training run's results.json holds"),
    ("empty.json", "{path} is not a training run's results.json: it has no 'model_type', 'test'"),
    ("missing.json", "{path} does not exist (hf-s2s train writes <output_dir>/results.json"),
])
def test_results_table_names_the_file_and_the_problem_in_one_line(files, capsys, name, message):
    path = files / name
    assert run_command("results-table", [str(files / "run" / "results.json"), str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("error: " + message.format(path=path))
    assert captured.err.count("\n") == 1  # one line, and no table with a row of None


def test_results_table_of_a_folder_suggests_its_results_files(files, capsys):
    run = files / "run"
    assert run_command("results-table", [str(run)]) == 2
    assert capsys.readouterr().err == (f"error: {run} is a folder, not a results file: give {run / 'results.json'} or "
                                       f"{run / 'model' / 'results.json'}\n")


@pytest.mark.parametrize(("name", "message"), [
    ("truncated.json", "{path} is not valid JSON (Unterminated string"),
    ("list.json", "{path} holds a JSON list, not the object"),
    ("empty.json", "{path} is not a training run's results.json: it has no 'model_type', 'model_config'"),
])
def test_make_model_card_names_the_file_and_the_problem_in_one_line(files, name, message):
    path, output = files / name, files / "card.md"
    with pytest.raises(SystemExit) as refused:
        run_command("make-model-card", [str(path), "--output", str(output)])
    assert str(refused.value.code).startswith("error: " + message.format(path=path)), refused.value.code
    assert not output.exists()


# --- RunResults: results.json as one typed object ---------------------------------------------------------------

RELEASED = Path(__file__).resolve().parent / "fixtures" / "results_0.2.0"
FIXTURES = ("current", "synthetic", "first_release")  # 0.2.0's keys (two runs), and the first training job's


@pytest.mark.parametrize("name", ["current", "synthetic"])
def test_a_results_json_reads_into_run_results_and_writes_back_byte_for_byte(name):
    text = (RELEASED / f"{name}.json").read_text()
    results = read_results(RELEASED / f"{name}.json")
    assert results.to_json() == text
    assert RunResults.from_dict(results.to_dict()) == results


def test_keys_a_release_does_not_know_are_kept_and_written_after_the_others():
    later = {**RUN, "bleurt": 0.5, "test": {"greedy": {**RUN["test"]["greedy"], "comet": 0.8}}}
    written = RunResults.from_dict(later).to_dict()
    assert list(written)[-1] == "bleurt" and written["bleurt"] == 0.5
    assert written["test"]["greedy"] == later["test"]["greedy"]  # a score keeps only the keys it had


# The one change to the cards 0.2.0 rendered: a card without a repository is named after the run's recipe (else
# its family's registered name), not after its family alone, which every run of the family on the corpus shared.
RENAMED_IN_0_3_0 = {"rnn-multi30k-de-en": "rnn-bahdanau-gru-multi30k-de-en",
                    "rnn-synthetic-reversal-src-tgt": "rnn-seq2seq-synthetic-reversal-src-tgt"}


def renamed_as_in_0_3_0(card: str) -> str:
    """A card 0.2.0 rendered, with the name 0.3.0 gives it in its title and model-index."""
    for old, new in RENAMED_IN_0_3_0.items():
        card = card.replace(f"- name: {old}\n", f"- name: {new}\n").replace(f"\n# {old}\n", f"\n# {new}\n")
    return card


def test_results_of_earlier_releases_give_the_card_table_and_summary_they_gave():
    """The card, the results-table row and the summary line of each results.json, as hf_s2s 0.2.0 rendered them
    (from its dicts, before RunResults): the first training job's file lacks the machine, the token count, the
    averaging, the EMA, the token budget and the decoding settings, and still renders the same."""
    runs = [read_results(RELEASED / f"{name}.json", required=("model_type", "test")) for name in FIXTURES]
    for name, results in zip(FIXTURES, runs, strict=True):
        repo_id = "someone/x" if name == "current" else None
        expected = renamed_as_in_0_3_0((RELEASED / f"{name}.card.md").read_text())
        assert render_model_card(results, repo_id=repo_id) == expected, name
        assert render_model_card(json.loads((RELEASED / f"{name}.json").read_text()), repo_id=repo_id) == expected
    assert results_table(runs) + "\n" == (RELEASED / "table.md").read_text()
    assert "".join(summary_line(results) + "\n" for results in runs) == (RELEASED / "summary.txt").read_text()


def test_make_model_card_and_results_table_read_an_earlier_releases_results(tmp_path, capsys):
    old = RELEASED / "first_release.json"
    assert run_command("make-model-card", [str(old), "--output", str(tmp_path / "card.md")]) == 0
    assert (tmp_path / "card.md").read_text() == renamed_as_in_0_3_0((RELEASED / "first_release.card.md").read_text())
    capsys.readouterr()
    assert run_command("results-table", [str(RELEASED / f"{name}.json") for name in FIXTURES]) == 0
    assert capsys.readouterr().out == (RELEASED / "table.md").read_text()
