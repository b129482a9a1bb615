"""The tests run in one of two modes, as a user runs the library:
- remote, when `PTC_ENGINE_URL` names a server (gRPC), with API key `PTC_ENGINE_API_KEY`
  (`tests/tests/all/python_client.rs` starts the wheel's own `ptc-engine serve` with a key);
- in process, when it is unset: `Sandbox()` and the integrations' default run programs in this
  process with the wheel's native module.
`Sandbox(url, api_key=key)` with the `url` and `key` fixtures is thus the sandbox of either mode.
Tests of what only a server does (refusing an API key) are marked `remote` and skipped in
process, saying so; a sandbox given a URL (an address nobody listens at) is remote in both."""

import os

import pytest

from ptc_engine import Sandbox

URL = os.environ.get("PTC_ENGINE_URL") or None
KEY = os.environ.get("PTC_ENGINE_API_KEY") or None


def pytest_configure(config):
    config.addinivalue_line("markers", "remote: what only a server does (checking API keys): skipped in process")


def pytest_collection_modifyitems(config, items):
    if URL is None:
        skip = pytest.mark.skip(reason="only a server checks API keys: this run is in process (no PTC_ENGINE_URL)")
        for item in items:
            if "remote" in item.keywords:
                item.add_marker(skip)


@pytest.fixture
async def sb():
    async with Sandbox(URL, api_key=KEY) as sandbox:
        assert (sandbox.url == "in-process") == (URL is None), sandbox.url
        yield sandbox


@pytest.fixture
def url():
    return URL


@pytest.fixture
def key():
    return KEY
