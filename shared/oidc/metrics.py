"""The identity provider as Prometheus sees it, on a service's own registry (``<service>_oidc_*``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from shared.labelled import Labelled

REJECT_REASONS = ("malformed", "algorithm", "unknown_key", "signature", "expired", "not_yet_valid", "audience",
                  "issuer", "claims", "invalid")


class OIDCMetrics:
    def __init__(self, registry: CollectorRegistry, service: str) -> None:
        self.jwks_fetches: Labelled = Labelled(Counter(
            f"{service}_oidc_jwks_fetches_total", "Reads of the identity provider's keys, by result", ["result"],
            registry=registry,
        ), "result")
        self.tokens_rejected: Labelled = Labelled(Counter(
            f"{service}_oidc_tokens_rejected_total", "Access tokens refused, by the check that failed", ["reason"],
            registry=registry,
        ), "reason")
        for result in ("ok", "error"):
            self.jwks_fetches[result]
        for reason in REJECT_REASONS:
            self.tokens_rejected[reason]

    def fetched(self, result: str) -> None:
        self.jwks_fetches[result].inc()

    def rejected(self, reason: str) -> None:
        self.tokens_rejected[reason].inc()
