"""speculative_config.prepare: the alias, the default draft length and every one-line refusal."""

from types import SimpleNamespace

import pytest

from blockdraft.specs import DrafterSpecError
from lilicorr_checkpoints import drafter_config, write_checkpoint
from vllm_lilicorr.speculative_config import prepare, take_cost_aware

TARGET = SimpleNamespace(architectures=["Qwen3ForCausalLM"], hidden_size=256, vocab_size=2048,
                         num_hidden_layers=4)


@pytest.fixture
def lilicorr(tmp_path):
    return str(write_checkpoint(tmp_path / "lilicorr", drafter_config()))


def refused(spec, *fragments):
    with pytest.raises(DrafterSpecError) as info:
        prepare(spec, TARGET)
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_lilicorr_becomes_dflash_with_default_length(lilicorr):
    spec = prepare({"method": "lilicorr", "model": lilicorr}, TARGET)
    assert spec == {"method": "dflash", "model": lilicorr, "num_speculative_tokens": 7}


def test_explicit_length_and_hyphenated_keys_are_kept(lilicorr):
    spec = prepare({"method": "lilicorr", "model": lilicorr, "num-speculative-tokens": 3,
                    "draft_sample_method": "probabilistic"}, TARGET)
    assert spec == {"method": "dflash", "model": lilicorr, "num_speculative_tokens": 3,
                    "draft_sample_method": "probabilistic"}


@pytest.mark.parametrize("length", [0, 8, 16])
def test_length_outside_the_block_is_refused(lilicorr, length):
    refused({"method": "lilicorr", "model": lilicorr, "num_speculative_tokens": length},
            f"{length} drafted tokens is outside 1..7", "block_size=8")


def test_missing_model_is_refused():
    refused({"method": "lilicorr", "num_speculative_tokens": 7}, '"model"')


@pytest.mark.parametrize("arch,kind,fix", [
    ("DFlashDraftModel", "dflash", '"method":"dflash"'),
    ("LlamaForCausalLMEagle3", "eagle3", '"method":"eagle3"'),
    ("DeepSeekMTPModel", "mtp", '"method":"mtp"'),
])
def test_other_drafters_under_lilicorr_are_refused(tmp_path, arch, kind, fix):
    folder = write_checkpoint(tmp_path / kind, drafter_config(arch), names=["fc.weight"])
    refused({"method": "lilicorr", "model": str(folder)}, f"is a {kind} checkpoint", fix)


def test_mtp_config_without_mtp_arch_is_refused(tmp_path):
    config = {**drafter_config("DeepseekV3ForCausalLM"), "num_nextn_predict_layers": 1}
    folder = write_checkpoint(tmp_path / "mtp", config, names=["x"])
    refused({"method": "lilicorr", "model": str(folder)}, "is a mtp checkpoint")


@pytest.mark.parametrize("method", ["mtp", "eagle3", "eagle", "draft_model"])
def test_lilicorr_checkpoint_under_other_methods_is_refused(lilicorr, method):
    refused({"method": method, "model": lilicorr, "num_speculative_tokens": 3},
            f"cannot serve method '{method}'", '"method":"lilicorr"')


@pytest.mark.parametrize("key,value,fragment", [
    ("lilicorr_candidate_topk", 3, "lilicorr_candidate_topk=3 must be a power of two"),
    ("lilicorr_candidate_topk", 32, "lilicorr_candidate_topk=32 must be a power of two"),
    ("lilicorr_num_heads", 3, "not divisible by lilicorr_num_heads=3"),
    ("lilicorr_num_heads", None, "no lilicorr_num_heads"),
    ("lilicorr_enabled", False, "lilicorr_enabled is not true"),
    ("lilicorr_logit_scale", 0, "lilicorr_logit_scale=0 must be a positive number"),
    ("lilicorr_factor_dim", "8", "lilicorr_factor_dim='8' must be an integer"),
])
def test_bad_lilicorr_keys_are_refused(tmp_path, key, value, fragment):
    folder = write_checkpoint(tmp_path / "bad", drafter_config(**{key: value}), names=["x"])
    refused({"method": "lilicorr", "model": str(folder)}, fragment)


@pytest.mark.parametrize("change,fragment", [
    ({"vocab_size": 4096}, "drafter vocabulary 4096 != target vocabulary 2048"),
    ({"hidden_size": 128, "head_dim": 32}, "drafter hidden size 128 != target hidden size 256"),
])
def test_target_mismatch_is_refused(tmp_path, change, fragment):
    folder = write_checkpoint(tmp_path / "d", {**drafter_config(), **change})
    refused({"method": "lilicorr", "model": str(folder)}, fragment)


def test_tap_layer_outside_target_is_refused(tmp_path):
    folder = write_checkpoint(tmp_path / "d", drafter_config(target_layer_ids=[1, 4]))
    refused({"method": "lilicorr", "model": str(folder)},
            "target_layer_ids [4] are outside the target's 4 layers")


def test_missing_and_extra_weights_are_refused(tmp_path):
    missing = write_checkpoint(tmp_path / "m", drafter_config(), drop=["lilicorr.in_head.weight"])
    refused({"method": "lilicorr", "model": str(missing)}, "1 weights missing",
            "lilicorr.in_head.weight")
    extra = write_checkpoint(tmp_path / "e", drafter_config(), add=["lilicorr.extra.weight"])
    refused({"method": "lilicorr", "model": str(extra)}, "its config does not describe")


def test_dflash_spelling_of_a_lilicorr_checkpoint_is_checked_but_kept(tmp_path, lilicorr):
    spec = {"method": "dflash", "model": lilicorr, "num_speculative_tokens": 7}
    assert prepare(spec, TARGET) == spec
    bad = write_checkpoint(tmp_path / "bad", {**drafter_config(), "vocab_size": 4096})
    refused({"method": "dflash", "model": str(bad), "num_speculative_tokens": 7},
            "drafter vocabulary 4096")
    refused({"method": "dflash", "model": lilicorr, "num_speculative_tokens": 8}, "outside 1..7")


@pytest.mark.parametrize("spec", [
    {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3},
    {"method": "dflash", "num_speculative_tokens": 7},
    {"method": "eagle3", "model": "org/not-a-local-folder", "num_speculative_tokens": 3},
    {"model": "org/not-a-local-folder", "num_speculative_tokens": 3},
])
def test_other_methods_are_untouched(spec):
    assert prepare(dict(spec), TARGET) == spec


def test_plain_dflash_checkpoint_is_untouched(tmp_path):
    folder = write_checkpoint(tmp_path / "dflash", drafter_config("DFlashDraftModel"))
    spec = {"method": "dflash", "model": str(folder), "num_speculative_tokens": 7}
    assert prepare(dict(spec), TARGET) == spec


@pytest.mark.parametrize("method", ["lilicorr", "dflash"])
def test_cost_aware_is_taken_out_for_our_proposer(method):
    spec, cost_aware = take_cost_aware({"method": method, "model": "m", "cost-aware": True})
    assert (spec, cost_aware) == ({"method": method, "model": "m"}, True)
    assert take_cost_aware({"method": method}) == ({"method": method}, False)


@pytest.mark.parametrize("spec, fragment", [
    ({"method": "lilicorr", "cost_aware": "yes"}, "must be true or false"),
    ({"method": "eagle3", "cost_aware": True}, "not 'eagle3'; remove it"),
    ({"method": "ngram", "cost_aware": True}, '"method":"lilicorr" and "dflash" drafts'),
])
def test_cost_aware_elsewhere_is_refused(spec, fragment):
    with pytest.raises(DrafterSpecError, match=fragment) as info:
        take_cost_aware(spec)
    assert "\n" not in str(info.value)
