"""Parsing of ACCELBACKENDS_* values: strict, and every error names the variable."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelbackends import ConfigError
from accelbackends.plugin import config


@pytest.mark.parametrize("text", ["1", "true", "YES", " On ", "True"])
def test_parse_bool_accepts_true_words_in_any_case(text: str) -> None:
    assert config.parse_bool(text, source="X") is True


@pytest.mark.parametrize("text", ["0", "false", "No", "OFF"])
def test_parse_bool_accepts_false_words_in_any_case(text: str) -> None:
    assert config.parse_bool(text, source="X") is False


@pytest.mark.parametrize("text", ["2", "maybe", "", "y", "enable"])
def test_parse_bool_rejects_other_words_naming_variable_and_accepted_values(text: str) -> None:
    with pytest.raises(ConfigError, match=r"ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD=.*1, true"):
        config.parse_bool(text, source="ACCELBACKENDS_DISABLE_PLUGIN_AUTOLOAD")


@pytest.mark.parametrize(("text", "seconds"), [("90", 90.0), ("1.5", 1.5), (" 300 ", 300.0)])
def test_parse_seconds_accepts_positive_numbers(text: str, seconds: float) -> None:
    assert config.parse_seconds(text, source="T") == seconds


@pytest.mark.parametrize("text", ["-1", "0", "abc", "nan", "inf", "", "10s", True])
def test_parse_seconds_rejects_non_positive_or_non_numbers_naming_variable(text: object) -> None:
    with pytest.raises(ConfigError, match=r"ACCELBACKENDS_TIMEOUT=.*positive"):
        config.parse_seconds(text, source="ACCELBACKENDS_TIMEOUT")


def test_parse_name_list_strips_items_and_empty_string_means_none() -> None:
    assert config.parse_name_list(" cuda , hpu", source="L") == ("cuda", "hpu")
    assert config.parse_name_list("", source="L") == ()


@pytest.mark.parametrize("text", ["cuda,,hpu", ",cuda", "cuda,"])
def test_parse_name_list_rejects_empty_items(text: str) -> None:
    with pytest.raises(ConfigError, match=r"ACCELBACKENDS_DISABLE=.*empty item"):
        config.parse_name_list(text, source="ACCELBACKENDS_DISABLE")


def test_parse_name_list_rejects_characters_that_cannot_be_a_plugin_name() -> None:
    with pytest.raises(ConfigError, match=r"'cu da' is not a plugin name"):
        config.parse_name_list("cu da,hpu", source="ACCELBACKENDS_DISABLE")


def test_blank_scalar_variable_counts_as_unset() -> None:
    assert config.read_name({"ACCELBACKENDS_ACCELERATOR": "  "}, config.ACCELERATOR) is None
    assert config.read_seconds({"ACCELBACKENDS_TIMEOUT": ""}, config.TIMEOUT) is None


def test_overrides_lists_only_prefixed_variables_sorted() -> None:
    env = {"ACCELBACKENDS_TIMEOUT": "5", "RANK": "0", "ACCELBACKENDS_BACKEND": "gloo"}
    assert config.overrides(env) == {"ACCELBACKENDS_BACKEND": "gloo", "ACCELBACKENDS_TIMEOUT": "5"}


@given(st.text())
def test_bool_parser_yields_a_bool_or_our_error(text: str) -> None:
    try:
        assert isinstance(config.parse_bool(text, source="B"), bool)
    except ConfigError as exc:
        assert "B=" in str(exc)


@given(st.text())
def test_seconds_parser_yields_a_positive_finite_float_or_our_error(text: str) -> None:
    try:
        value = config.parse_seconds(text, source="S")
    except ConfigError as exc:
        assert "S=" in str(exc)
    else:
        assert value > 0 and math.isfinite(value)


@given(st.text())
def test_name_list_parser_yields_clean_names_or_our_error(text: str) -> None:
    try:
        names = config.parse_name_list(text, source="N")
    except ConfigError as exc:
        assert "N=" in str(exc)
    else:
        assert all(name and name == name.strip() and "," not in name for name in names)
