"""hf_s2s.training.generation_settings: the generation configs a run decodes with and saves, settled before training.
Each settled config must save with transformers' own strict check (GenerationConfig.save_pretrained) and load back
as it was; what the run changes in the config it was given is said, field by field."""

import copy
import json

import pytest
from transformers import GenerationConfig

from hf_s2s.training.generation_settings import settle_generation_configs
from tests.runs import tiny_args

# A converted OpenNMT-py Transformer's generation config (hf-s2s convert writes these fields), and one written by hand
# with flags that have no effect in its own mode.
CONVERTED = {"bos_token_id": 2, "decoder_start_token_id": 2, "eos_token_id": 3, "pad_token_id": 1, "num_beams": 5,
             "early_stopping": True, "length_penalty": 0.6, "max_length": 251, "max_len_a": 1.25, "max_len_b": 5}
HAND_WRITTEN = {"eos_token_id": 2, "pad_token_id": 0, "num_beams": 1, "early_stopping": True, "length_penalty": 0.6,
                "temperature": 0.7, "top_p": 0.9, "max_new_tokens": 30}


def loaded(tmp_path, fields: dict) -> GenerationConfig:
    """``fields`` as a model folder's generation_config.json, loaded as from_pretrained loads it (unchecked)."""
    folder = tmp_path / "given"
    folder.mkdir(exist_ok=True)
    (folder / "generation_config.json").write_text(json.dumps(fields))
    return GenerationConfig.from_pretrained(folder)


def settle(tmp_path, given, *flags):
    args = tiny_args(tmp_path / "run", "transformer_seq2seq", *flags)  # --generation_max_length 16
    return settle_generation_configs(given, args.decoding, args.training, source="the/folder")


def saves_and_reloads(config: GenerationConfig, folder) -> dict:
    """Save ``config`` as the final save does (strictly checked, as it was changed) and return what reloads."""
    config.save_pretrained(folder)
    return GenerationConfig.from_pretrained(folder).to_diff_dict()


def test_greedy_test_decoding_drops_the_beam_flags_of_a_converted_folder_in_the_saved_config_only(tmp_path):
    """transformers refused to save num_beams 1 with early_stopping: at the end of the run, losing the weights."""
    given = loaded(tmp_path, CONVERTED)
    before = given.to_diff_dict()
    settled = settle(tmp_path, given, "--test_num_beams", "1")
    assert given.to_diff_dict() == before  # the model's own config is left alone
    # validation keeps the folder's beam search; the saved folder decodes greedily, as the test set was decoded
    assert (settled.training.num_beams, settled.training.early_stopping, settled.training.length_penalty) == (5, True,
                                                                                                          0.6)
    assert (settled.saved.num_beams, settled.saved.early_stopping, settled.saved.length_penalty) == (1, None, None)
    assert settled.training.max_length == settled.saved.max_length == 16  # --generation_max_length
    assert settled.changes == [
        "max_length 251 -> 16 (--generation_max_length)",
        "in the saved folder: num_beams 5 -> 1 (the largest --test_num_beams)",
        "in the saved folder: early_stopping True -> unset (used only by beam search, and num_beams is 1)",
        "in the saved folder: length_penalty 0.6 -> unset (used only by beam search, and num_beams is 1)",
    ]
    for name, config in (("training", settled.training), ("saved", settled.saved)):
        reloaded = saves_and_reloads(config, tmp_path / name)
        assert {k: v for k, v in reloaded.items() if k != "transformers_version"} == \
            {k: v for k, v in config.to_diff_dict().items() if k != "transformers_version"}
    with pytest.raises(ValueError, match="early_stopping"):  # what the run saved before: refused by transformers
        broken = copy.deepcopy(given)
        broken.num_beams = 1
        broken.save_pretrained(tmp_path / "broken")


def test_a_test_beam_keeps_the_beam_flags(tmp_path):
    settled = settle(tmp_path, loaded(tmp_path, CONVERTED), "--test_num_beams", "1,4")
    assert (settled.saved.num_beams, settled.saved.early_stopping, settled.saved.length_penalty) == (4, True, 0.6)
    saves_and_reloads(settled.saved, tmp_path / "saved")


def test_a_hand_written_config_loses_only_flags_without_effect_and_the_length_limit_that_would_override_the_runs(
        tmp_path):
    given = loaded(tmp_path, HAND_WRITTEN)
    settled = settle(tmp_path, given, "--test_num_beams", "1", "--max_len_a", "2")
    for config in (settled.training, settled.saved):
        assert (config.num_beams, config.early_stopping, config.length_penalty, config.temperature, config.top_p,
                config.max_new_tokens, config.max_length, config.max_len_a) == (1, None, None, None, None, None, 16, 2)
    assert settled.changes == [
        "max_length unset -> 16 (--generation_max_length)",
        "max_new_tokens 30 -> unset (it would override --generation_max_length)",
        "max_len_a unset -> 2.0 (--max_len_a)",
        "temperature 0.7 -> unset (used only when sampling, and the run does not sample)",
        "top_p 0.9 -> unset (used only when sampling, and the run does not sample)",
        "early_stopping True -> unset (used only by beam search, and num_beams is 1)",
        "length_penalty 0.6 -> unset (used only by beam search, and num_beams is 1)",
    ]
    saves_and_reloads(settled.training, tmp_path / "training")
    saves_and_reloads(settled.saved, tmp_path / "saved")


def test_a_sampling_config_decodes_one_greedy_or_beam_translation_as_the_runs_scores_say(tmp_path):
    """A folder that samples would have its 'greedy' test score measured on samples, and several returned
    sequences per sentence break validation's comparison with the references."""
    given = loaded(tmp_path, {"do_sample": True, "temperature": 0.7, "num_beams": 4, "num_return_sequences": 2})
    settled = settle(tmp_path, given, "--test_num_beams", "1,2")
    assert (settled.saved.do_sample, settled.saved.temperature, settled.saved.num_return_sequences) == (False, None,
                                                                                                       None)
    assert settled.changes[:2] == ["do_sample True -> False (the run validates and tests with greedy and beam search)",
                                   "num_return_sequences 2 -> unset (the run decodes one translation per sentence)"]
    saves_and_reloads(settled.saved, tmp_path / "saved")


def test_what_cannot_be_reconciled_is_refused_naming_the_folder_and_the_field(tmp_path):
    given = loaded(tmp_path, {"num_beams": 4, "output_scores": True})  # without return_dict_in_generate
    with pytest.raises(ValueError, match=r"the generation config of the/folder cannot be saved in the checkpoints with "
                                         r"this run's decoding settings: .*`output_scores`.* Fix it in "
                                         r"the/folder/generation_config.json"):
        settle(tmp_path, given)


def test_a_new_models_config_gets_the_runs_settings(tmp_path):
    given = GenerationConfig(max_length=128, max_len_a=1.3, max_len_b=5)
    settled = settle(tmp_path, given, "--no_length_bound")
    assert (settled.saved.num_beams, settled.saved.max_length, settled.saved.max_len_a, settled.saved.max_len_b) == \
        (2, 16, None, None)
    assert settled.training.num_beams is None  # validation decodes greedily (Seq2SeqTrainer's default)
