"""The check the integrations' contract tests use (`private_api`, in conftest.py) says, when a
framework changes a name, which framework, which installed version and which name."""

import importlib.metadata

import pytest


def test_a_changed_private_name_fails_naming_the_framework_version_and_name(private_api):
    api = private_api("pytest", "ptc_engine.integrations.example")
    version = importlib.metadata.version("pytest")
    with pytest.raises(pytest.fail.Exception) as gone:
        api.get("_pytest.outcomes", "_no_such_name")
    assert str(gone.value).startswith(f"pytest {version}: _pytest.outcomes._no_such_name is gone; "), gone.value
    assert "ptc_engine.integrations.example relies on it" in str(gone.value)
    with pytest.raises(pytest.fail.Exception) as moved:
        api.get("_pytest._no_such_module")
    assert f"pytest {version}: _pytest._no_such_module cannot be imported" in str(moved.value)
    with pytest.raises(pytest.fail.Exception) as changed:
        api.takes(lambda value, other: None, "_pytest.example", "other")
    assert f"pytest {version}: _pytest.example takes (value, other), not (other, ...)" in str(changed.value)
    api.takes(lambda value, other: None, "_pytest.example", "value", "other")
    api.has(pytest, "pytest", "fail", "raises")
