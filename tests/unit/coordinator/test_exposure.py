"""Where the REST API may listen without an API token (exposure.py, pure)."""

from __future__ import annotations

import pytest

from crossfeed.services.coordinator.exposure import is_loopback, refusal

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_loopback_addresses_need_nothing(host):
    assert is_loopback(host)
    assert refusal(host, None, False) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "coordinator-0.svc", ""])
def test_anything_else_needs_a_token_or_insecure(host):
    assert not is_loopback(host)
    message = refusal(host, None, False)
    assert message is not None and "api_token" in message and "--insecure" in message
    assert refusal(host, "t", False) is None
    assert refusal(host, None, True) is None
