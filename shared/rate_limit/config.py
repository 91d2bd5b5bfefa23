"""What the limits are: defaults from the environment, overrides per organisation (and per model
within one) from a YAML file.

``AGENT_SERVICE_RATE_LIMIT_REQUESTS``, ``_INPUT_TOKENS`` and ``_OUTPUT_TOKENS`` per
``AGENT_SERVICE_RATE_LIMIT_WINDOW_S`` (0 = no limit) apply to each (organisation, model) pair; both
services read these same variables, so the direct path honours the agent's limits. The overrides
file looks like::

    acme:                 # an organisation
      requests: 2         # any of requests, input_tokens, output_tokens, window_s
      models:
        gpt-4o: {requests: 10}
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

NonNegative = Annotated[int, Field(ge=0)]


class Dimension(StrEnum):
    REQUESTS = "requests"
    INPUT_TOKENS = "input_tokens"
    OUTPUT_TOKENS = "output_tokens"


class Limits(BaseModel):
    """The budget of one (organisation, model) pair; 0 = that dimension is not limited."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests: NonNegative = 0
    input_tokens: NonNegative = 0
    output_tokens: NonNegative = 0
    window_s: Annotated[float, Field(gt=0, le=86_400)] = 60.0

    def of(self, dimension: Dimension) -> int:
        return getattr(self, dimension.value)

    @property
    def unlimited(self) -> bool:
        return not (self.requests or self.input_tokens or self.output_tokens)


class LimitsOverride(BaseModel):
    model_config = ConfigDict(extra="forbid")

    requests: NonNegative | None = None
    input_tokens: NonNegative | None = None
    output_tokens: NonNegative | None = None
    window_s: Annotated[float, Field(gt=0, le=86_400)] | None = None

    def over(self, base: Limits) -> Limits:
        return base.model_copy(update=self.model_dump(exclude_none=True))


class OrganisationLimits(LimitsOverride):
    models: dict[str, LimitsOverride] = {}


class RateLimitSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AGENT_SERVICE_RATE_LIMIT_", extra="ignore")

    requests: NonNegative = 0
    input_tokens: NonNegative = 0
    output_tokens: NonNegative = 0
    window_s: Annotated[float, Field(gt=0, le=86_400)] = 60.0
    # YAML file of per-organisation overrides (see the module's docstring).
    overrides_file: Path | None = None
    # Longest a call waits for room; a longer wait fails the run with RATE_LIMITED (when to retry).
    max_wait_s: Annotated[float, Field(ge=0)] = 120.0
    # Prefix of the Redis keys, when the counts are kept in Redis.
    redis_prefix: str = "taskforce:ratelimit"


class RateLimitConfig:
    def __init__(self, defaults: Limits, organisations: dict[str, OrganisationLimits] | None = None) -> None:
        self.defaults = defaults
        self.organisations = organisations or {}

    @classmethod
    def from_settings(cls, settings: RateLimitSettings) -> RateLimitConfig:
        defaults = Limits(**settings.model_dump(include=set(Limits.model_fields)))
        overrides = settings.overrides_file
        return cls(defaults, load_overrides(overrides) if overrides is not None else None)

    def limits_for(self, org: str | None, model: str) -> Limits:
        org_limits = self.organisations.get(org) if org is not None else None
        if org_limits is None:
            return self.defaults
        limits = org_limits.over(self.defaults)
        model_limits = org_limits.models.get(model)
        return model_limits.over(limits) if model_limits is not None else limits

    @property
    def unlimited(self) -> bool:
        """No limit anywhere: callers skip the limiter altogether."""
        every = [self.defaults] + [o.over(self.defaults) for o in self.organisations.values()]
        every += [m.over(o.over(self.defaults)) for o in self.organisations.values() for m in o.models.values()]
        return all(limits.unlimited for limits in every)


class RateLimitConfigError(ValueError):
    pass


def load_overrides(path: Path) -> dict[str, OrganisationLimits]:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise RateLimitConfigError(f"rate limit overrides {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise RateLimitConfigError(f"rate limit overrides {path}: expected a mapping of organisations")
    try:
        return {str(org): OrganisationLimits.model_validate(value or {}) for org, value in raw.items()}
    except ValidationError as exc:
        raise RateLimitConfigError(f"rate limit overrides {path}: {exc}") from exc
