"""Tests of the model catalog: its entries' published parameter counts, get_model by name
or path, the Hugging Face ids that are aliases, the did-you-mean of a near miss."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tpsim.models import MODELS, ModelError, get_model

DATA = Path(__file__).parents[1] / "data" / "models"

# -- catalog: published parameter counts ---------------------------------------------------

PUBLISHED_PARAMS = {
    "gpt3-175b": 175e9,
    "llama-2-7b": 6.74e9,
    "llama-2-13b": 13.0e9,
    "llama-2-70b": 68.98e9,
    "llama-3.1-8b": 8.03e9,
    "llama-3.1-70b": 70.55e9,
    "llama-3.1-405b": 405.8e9,
    "mistral-7b": 7.24e9,
    "qwen2.5-72b": 72.7e9,
    "codellama-34b": 33.7e9,
    "llama-33b": 32.5e9,  # LLaMA paper, table 2
    # the config.json entries (model cards; active counts in tests/models/test_moe.py)
    "mixtral-8x7b": 46.7e9,
    "mixtral-8x22b": 141e9,
    "qwen3-32b": 32.8e9,
    "qwen3-30b-a3b": 30.5e9,
    "qwen3-235b-a22b": 235e9,
    "deepseek-v3": 671e9,  # README_WEIGHTS.md: main model 671 B (the MTP module apart)
    "gpt-oss-120b": 116.83e9,  # model card (its biases, 0.04 B, are not counted)
    "gpt-oss-20b": 20.91e9,
    # Meta's model cards count the vision encoder (about 0.87 B), which tpsim does not
    "llama-4-scout": 109e9,
    "llama-4-maverick": 400e9,
    # MiniMax-AI/MiniMax-M2 README: "230 billion total parameters with 10 billion active"
    # (the MTP modules apart)
    "minimax-m2": 230e9,
    # Qwen/Qwen3-Next-80B-A3B-Instruct model card: "80B total parameters and 3B activated"
    # (the MTP layer apart)
    "qwen3-next-80b-a3b": 80e9,
}
#: Entries whose published count holds a vision encoder tpsim leaves out: within 1.2 %.
WITH_VISION = ("llama-4-scout", "llama-4-maverick")


def test_catalog_holds_exactly_the_listed_models() -> None:
    assert sorted(MODELS) == sorted(PUBLISHED_PARAMS)
    for key, spec in MODELS.items():
        assert spec.name == key


@pytest.mark.parametrize(("name", "expected"), sorted(PUBLISHED_PARAMS.items()))
def test_catalog_param_counts_match_published(name: str, expected: float) -> None:
    rel = 0.012 if name in WITH_VISION else 0.01
    assert MODELS[name].num_params() == pytest.approx(expected, rel=rel)


# -- get_model -------------------------------------------------------------------------------


def test_get_model_by_name_is_case_insensitive() -> None:
    assert get_model("LLaMA-2-70B") is MODELS["llama-2-70b"]
    assert get_model(" mistral-7b ") is MODELS["mistral-7b"]


def test_get_model_by_path() -> None:
    assert get_model(str(DATA / "gpt2.json")).num_params() == 124_439_808
    assert get_model(DATA / "gpt2.json").name == "gpt2"


def test_get_model_unknown_name_lists_the_catalog() -> None:
    with pytest.raises(ModelError) as info:
        get_model("foo")
    assert str(info.value) == (
        "model='foo': unknown model; catalog: codellama-34b, deepseek-v3, gpt-oss-120b, "
        "gpt-oss-20b, gpt3-175b, llama-2-13b, "
        "llama-2-70b, llama-2-7b, llama-3.1-405b, llama-3.1-70b, llama-3.1-8b, llama-33b, "
        "llama-4-maverick, llama-4-scout, minimax-m2, "
        "mistral-7b, mixtral-8x22b, mixtral-8x7b, qwen2.5-72b, qwen3-235b-a22b, qwen3-30b-a3b, "
        "qwen3-32b, qwen3-next-80b-a3b or a path to a config.json"
    )


def test_get_model_hub_id_is_not_fetched() -> None:
    """A hub id of a catalog model is its alias; any other is refused, never fetched."""
    refused = re.escape("model='meta-llama/Llama-3.2-1B': no such file")
    with pytest.raises(ModelError, match=refused):
        get_model("meta-llama/Llama-3.2-1B")


# -- names: aliases and near misses -------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "name"),
    [
        ("meta-llama/Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b"),
        ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"),
        ("mistralai/Mistral-7B-v0.1", "mistral-7b"),
    ],
)
def test_hugging_face_ids_are_aliases_of_their_catalog_entry(given: str, name: str) -> None:
    assert get_model(given) is MODELS[name]


@pytest.mark.parametrize(
    ("given", "hint"),
    [
        ("llama3.1-70b", "did you mean 'llama-3.1-70b'?"),
        ("lama-2-70b", "did you mean 'llama-2-70b'?"),
        ("Llama_3.1_8B", "did you mean 'llama-3.1-8b'?"),
    ],
)
def test_a_near_miss_model_name_says_did_you_mean(given: str, hint: str) -> None:
    with pytest.raises(ModelError, match=re.escape(hint)):
        get_model(given)


@pytest.mark.parametrize("given", ["llama-2-8b", "meta-llama/Llama-3.2-1B", "mixtral"])
def test_no_suggestion_of_a_model_with_other_numbers(given: str) -> None:
    """llama-3.2-1b is no typo of llama-3.1-8b: a planner must not be steered to it."""
    with pytest.raises(ModelError) as info:
        get_model(given)
    assert "did you mean" not in str(info.value)
