"""hf_s2s.training.machines in one process: how a machine tells whether it sees the main process's output folder
(the launch named in its lock file), which folder layouts a launch refuses, the copy of the tokenizer a machine
writes, and the digest that compares tokenizers across machines. The launches themselves (two machines on
localhost) are in tests/test_distributed.py."""

from types import SimpleNamespace

import pytest
from accelerate.utils import DistributedType

from hf_s2s.data import tokenization
from hf_s2s.data.synthetic import text_reversal_corpus
from hf_s2s.training.machines import (
    LaunchRefused,
    check_layout,
    difference_refusal,
    folder_files,
    write_missing_files,
)
from hf_s2s.training.run_dir import LOCK_NAME, RunLock, launch_holding


def test_the_lock_file_names_the_launch_that_took_it(tmp_path):
    assert launch_holding(tmp_path) is None  # no lock file
    with RunLock(tmp_path):
        assert launch_holding(tmp_path) is None  # a run of one process names no launch
    with RunLock(tmp_path, "3f9a0c1d"):
        assert launch_holding(tmp_path) == "3f9a0c1d"
        with pytest.raises(BlockingIOError, match=r"in use by another training run \(process \d+\)"):
            RunLock(tmp_path, "another").__enter__()
    assert (tmp_path / LOCK_NAME).read_text().split()[1] == "3f9a0c1d"  # left for the next run to replace


def training(save_on_each_node: bool, sharding: DistributedType = DistributedType.MULTI_CPU):
    """What check_layout reads of the training arguments."""
    return SimpleNamespace(output_dir="runs/x", save_on_each_node=save_on_each_node,
                           distributed_state=SimpleNamespace(distributed_type=sharding))


# (process index, whether that process, the first of another machine, sees process 0's folder): two machines of two
# processes each
SHARED = [(0, None), (1, None), (2, True), (3, None)]
SEPARATE = [(0, None), (1, None), (2, False), (3, None)]


@pytest.mark.parametrize(("seen", "save_on_each_node", "refusal"), [
    (SHARED, False, None),
    (SEPARATE, True, None),
    (SEPARATE, False, "the machine(s) of process(es) 2 have a folder of their own there, not the one process 0 "
                      "writes, and without --save_on_each_node only process 0 saves"),
    (SHARED, True, "--save_on_each_node: the machine(s) of process(es) 2 share --output_dir runs/x with process 0"),
    ([(0, None), (1, None)], True, None),  # one machine: nothing to compare
], ids=["shared", "separate with the flag", "separate without", "shared with the flag", "one machine"])
def test_a_launch_whose_folders_do_not_fit_save_on_each_node_is_refused(seen, save_on_each_node, refusal):
    if refusal is None:
        check_layout(seen, training(save_on_each_node))
        return
    with pytest.raises(LaunchRefused) as refused:
        check_layout(seen, training(save_on_each_node))
    assert refusal in str(refused.value)


@pytest.mark.parametrize("sharding", [DistributedType.FSDP, DistributedType.DEEPSPEED])
def test_a_folder_per_machine_is_refused_for_a_model_gathered_on_process_0(sharding):
    with pytest.raises(LaunchRefused, match=f"--save_on_each_node with {sharding.value}: the model's whole weights "
                                            "are gathered on process 0 only"):
        check_layout(SEPARATE, training(True, sharding))
    check_layout(SHARED, training(False, sharding))


def test_a_machine_writes_the_files_it_lacks_and_refuses_ones_that_differ(tmp_path):
    main, machine = tmp_path / "main", tmp_path / "machine"
    (main / "sub").mkdir(parents=True)
    (main / "tokenizer.json").write_text('{"a": 1}')
    (main / "sub" / "vocab.txt").write_text("a\nb\n")
    files = folder_files(main)
    assert files == {"sub/vocab.txt": b"a\nb\n", "tokenizer.json": b'{"a": 1}'}
    write_missing_files(machine, files)
    assert folder_files(machine) == files
    write_missing_files(machine, files)  # a resumed run's own copy: left as it is
    (machine / "sub" / "vocab.txt").unlink()
    (machine / "tokenizer.json").write_text('{"a": 2}')
    with pytest.raises(ValueError, match=r"tokenizer.json on this machine differs from process 0's tokenizer.json"):
        write_missing_files(machine, files)
    assert not (machine / "sub" / "vocab.txt").exists()  # refused before anything was written
    assert (machine / "tokenizer.json").read_text() == '{"a": 2}'


def test_what_each_machine_read_for_itself_must_be_process_0s():
    counts = {"train": 256, "test": 8}
    assert difference_refusal([counts, counts, counts], "the pairs", "same corpus") is None
    assert difference_refusal([counts, counts, {"train": 200, "test": 8}, {"train": 1}], "the number of pairs",
                              "give every machine the same corpus") == (
        "the number of pairs differs between the machines of the launch ({'train': 256, 'test': 8} on process 0, "
        "{'train': 200, 'test': 8} on process 2): give every machine the same corpus")


@pytest.fixture(scope="module")
def corpus():
    return text_reversal_corpus(num_train=500, num_validation=8, num_test=8)


def test_the_tokenizer_digest_tells_copies_from_other_tokenizers(tmp_path, corpus):
    def trained(vocab_size: int, joint: bool = True):
        return tokenization.train_translation_tokenizers(corpus, "src", "tgt", vocab_size, joint=joint)

    tokenizers = trained(280)
    tokenizers.save_pretrained(tmp_path / "saved")
    copy = tokenization.TranslationTokenizers.from_pretrained(tmp_path / "saved").source
    digest = tokenization.tokenizer_digest(tokenizers.as_tokenizer())
    assert tokenization.tokenizer_digest(copy) == digest
    assert tokenization.tokenizer_digest(trained(300).as_tokenizer()) != digest
    separate = trained(280, joint=False)
    other_target = tokenization.TranslationTokenizers(separate.source, trained(300, joint=False).target)
    assert tokenization.tokenizer_digest(separate.as_tokenizer()) != \
        tokenization.tokenizer_digest(other_target.as_tokenizer())  # the target side counts too
