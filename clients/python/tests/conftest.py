"""The tests run against a real ptc-engine server: `PTC_ENGINE_URL` (gRPC), with API key
`PTC_ENGINE_API_KEY` (`tests/tests/all/python_client.rs` starts one and runs these tests),
which `Sandbox()` and the integrations take by default too."""

import os

import pytest

from ptc_engine import Sandbox

URL = os.environ.get("PTC_ENGINE_URL", "http://127.0.0.1:50051")
KEY = os.environ.get("PTC_ENGINE_API_KEY") or None


@pytest.fixture
async def sb():
    async with Sandbox(URL, api_key=KEY) as sandbox:
        yield sandbox


@pytest.fixture
def url():
    return URL


@pytest.fixture
def key():
    return KEY
