"""Settings: layers, the client's camelCase, and what a search is configured with."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from accelopt.lsp.config import merge_settings
from accelopt.lsp.optimize import search_config
from accelopt.lsp.protocol import SearchOptions


def test_workspace_configuration_overrides_initialization_options_key_by_key():
    init = {"hardware": "trn2", "search": {"iterations": 3, "budgetUsd": 5.0}, "agents": {"mode": "llm"}}
    workspace = {"search": {"budgetUsd": None, "beamWidth": 2}}
    settings = merge_settings(init, workspace, None)
    assert settings.hardware == "trn2"
    assert settings.search.iterations == 3
    assert settings.search.beam_width == 2
    assert settings.search.budget_usd is None, "a cleared budget must not come back from an older layer"
    assert settings.agents.mode == "llm"


def test_invalid_settings_are_refused_with_the_field_named():
    with pytest.raises(ValidationError, match="hardware"):
        merge_settings({"hardware": "trn9"})


def test_endpoints_are_not_logged_verbatim():
    settings = merge_settings(
        {"agents": {"baseUrl": "https://user:token@llm.example/v1", "apiKeyEnv": "MY_KEY"}}
    )
    redacted = settings.redacted()
    assert "token" not in str(redacted)
    assert redacted["agents"]["apiKeyEnv"] == "MY_KEY"  # a variable's name is not a secret


def test_search_config_takes_request_options_over_settings():
    settings = merge_settings(
        {
            "hardware": "trn2",
            "search": {"iterations": 5, "beamWidth": 3, "correctnessSeeds": 2, "maxEvaluations": 40},
        }
    )
    config = search_config(settings, SearchOptions(iterations=1, budget_usd=0.5), "abc")
    assert (config.iterations, config.beam_width, config.seeds) == (1, 3, 2)
    assert config.hardware == "trn2"
    assert config.search_id == "abc"
    assert config.budget.max_dollars == 0.5
    assert config.budget.max_evaluations == 40


def test_an_auto_target_follows_the_kernels_nki_generation():
    legacy = "import neuronxcc.nki.language as nl\n"
    current = "import nki\nimport nki.language as nl\n"
    auto = merge_settings({})
    assert auto.hardware == "auto"
    assert search_config(auto, SearchOptions(), "a", legacy).hardware == "trn1"
    assert search_config(auto, SearchOptions(), "b", current).hardware == "trn2"
    chosen = merge_settings({"hardware": "trn1"})
    assert search_config(chosen, SearchOptions(), "c", current).hardware == "trn1"


CONFIG_FILE = """
agents = "llm"
[search]
iterations = 7
beam_width = 3
[search.budget]
max_dollars = 2.5
[llm]
base_url = "http://127.0.0.1:8000/v1"
model = "file-model"
preset = "llamacpp"
max_tokens = 2048
[llm.prices."file-model"]
prompt_per_million = 0.5
completion_per_million = 1.5
"""


def test_the_cli_configuration_file_applies_in_the_editor(tmp_path):
    from accelopt.lsp.agents import llm_config

    path = tmp_path / "accelopt.toml"
    path.write_text(CONFIG_FILE)
    settings = merge_settings({"agents": {"configFile": str(path), "model": "editor-model"}, "search": {"beamWidth": 2}})
    llm = llm_config(settings.agents)
    # the file's endpoint, limits and prices; the editor's model wins where it is set
    assert (llm.base_url, llm.preset, llm.max_tokens) == ("http://127.0.0.1:8000/v1", "llamacpp", 2048)
    assert llm.model == "editor-model" and "file-model" in llm.prices
    config = search_config(settings, SearchOptions(), "abc")
    assert (config.iterations, config.beam_width, config.budget.max_dollars) == (7, 2, 2.5)


def test_without_a_file_the_editor_has_the_cli_defaults():
    from accelopt.agents.llm_config import LLMConfig
    from accelopt.lsp.agents import llm_config

    llm = llm_config(merge_settings({"agents": {"baseUrl": "http://127.0.0.1:1/v1"}}).agents)
    defaults = LLMConfig()
    assert (llm.max_tokens, llm.timeout_s, llm.max_retries) == (
        defaults.max_tokens, defaults.timeout_s, defaults.max_retries)


def test_a_broken_configuration_file_refuses_the_search_with_its_line(tmp_path):
    from accelopt.lsp.optimize import SearchRefused

    path = tmp_path / "bad.json"
    path.write_text('{"search": {"iterations": 2,,}}')
    settings = merge_settings({"agents": {"configFile": str(path)}})
    with pytest.raises(SearchRefused, match=r"bad.json:1: not valid JSON"):
        search_config(settings, SearchOptions(), "abc")


def test_unknown_settings_are_named_with_their_path():
    from accelopt.lsp.config import unknown_keys

    layer = {"hardware": "trn2", "hardwear": "trn1", "agents": {"mode": "llm", "modee": "x"}, "search": {"beamWidth": 2}}
    assert unknown_keys(layer) == ["hardwear", "agents.modee"]
