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
