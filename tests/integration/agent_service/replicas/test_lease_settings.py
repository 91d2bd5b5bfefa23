"""The lease settings: defaults, environment names, and a renewal interval that must fit the lease."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agent_service.settings import AgentServiceSettings


def test_defaults_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = AgentServiceSettings()
    assert (defaults.lease_seconds, defaults.lease_renew_seconds) == (15.0, 5.0)
    monkeypatch.setenv("AGENT_SERVICE_LEASE_SECONDS", "30")
    monkeypatch.setenv("AGENT_SERVICE_LEASE_RENEW_SECONDS", "2.5")
    configured = AgentServiceSettings()
    assert (configured.lease_seconds, configured.lease_renew_seconds) == (30.0, 2.5)


@pytest.mark.parametrize(("lease", "renew"), [(5.0, 5.0), (5.0, 6.0), (0.0, 0.1), (5.0, 0.0)])
def test_a_renewal_interval_that_does_not_fit_the_lease_is_refused(lease: float, renew: float) -> None:
    with pytest.raises(ValidationError):
        AgentServiceSettings(lease_seconds=lease, lease_renew_seconds=renew)
