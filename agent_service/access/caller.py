"""Who is calling, and what that lets them see and do: ``Caller``, ``Owner`` and the two rules every door
applies, ``acting_for`` (whom a request may act for) and ``may_see`` (which resources it may touch).

Every credential resolves to one ``Caller`` at the edge (``access.resolver``). Three kinds:

- a **service** (our chat, another backend): acts for users of the organisations it is allowed (all of
  them for a full-trust service), naming the user in ``user_context`` or A2A metadata; it sees what it
  created (a full-trust service: everything, as a service key always could);
- an **agent** (an A2A client or other outside agent): acts as itself, or for the organisations it is
  bound to, and sees only what it created;
- a **user** (a token with a user subject): acts only as that user of that organisation, and sees what
  belongs to that user, whoever started it (the chat starts a user's sessions for them).

A resource records its ``Owner``: the caller that created it and the user it acts for. A caller that may
not see a resource is told it does not exist (404), never that it belongs to someone else.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from agent_service.errors import Forbidden
from shared.protocol import UserContext


class CallerKind(StrEnum):
    SERVICE = "service"
    AGENT = "agent"
    USER = "user"


class Permission(StrEnum):
    """What a caller may do, door by door."""

    # execute, and a session's status, events and cancel
    RUNS = "runs"
    # the A2A bindings (tasks and contexts)
    A2A = "a2a"
    # list and delete what the agent remembers of a user
    MEMORY = "memory"
    # the agent as an MCP server (/mcp: the ask tool)
    MCP = "mcp"


ALL_PERMISSIONS = frozenset(Permission)
# The name of the full-trust service plain AGENT_SERVICE_API_KEYS entries are; rows older than owners
# belong to it (``LEGACY_PRINCIPAL``).
LEGACY_SERVICE = "default"
LEGACY_PRINCIPAL = f"service:{LEGACY_SERVICE}"


@dataclass(frozen=True, slots=True)
class Owner:
    """Who a resource belongs to: the caller that created it (``Caller.principal``), and the user it
    acts for."""

    principal: str
    user_id: str | None
    org_id: str | None


@dataclass(frozen=True, slots=True)
class Caller:
    name: str
    kind: CallerKind
    # The organisations it may act for; None: any (a full-trust service).
    orgs: frozenset[str] | None
    permissions: frozenset[Permission]
    # A user token's user, its organisation and its permissions claim (what the agent's tools may use).
    user_id: str | None = None
    org_id: str | None = None
    user_permissions: tuple[str, ...] = ()

    @property
    def principal(self) -> str:
        """What its resources record as their creator: kind and name, so that a user whose subject is
        an agent's name is still not that agent."""
        return f"{self.kind.value}:{self.name}"

    @property
    def full_trust(self) -> bool:
        return self.kind is CallerKind.SERVICE and self.orgs is None

    def require(self, permission: Permission) -> None:
        if permission not in self.permissions:
            raise Forbidden(f"{self.name} may not use {permission.value}")

    def acting_for(self, requested: UserContext | None) -> UserContext:
        """The user a request acts for: ``requested`` as it is when the caller may act for that user,
        the caller's own user where it acts as itself; ``Forbidden`` when it names someone else."""
        if self.kind is CallerKind.USER:
            if requested is not None and (requested.user_id != self.user_id or requested.org_id != self.org_id):
                raise Forbidden("a user's token acts for that user only; user_context names another user")
            # The token's permissions, not what a request claims.
            return UserContext(user_id=self.user_id, org_id=self.org_id, permissions=list(self.user_permissions))
        if self.kind is CallerKind.AGENT:
            org = requested.org_id if requested is not None else None
            if requested is not None and requested.user_id != self.name:
                raise Forbidden(f"{self.name} acts as itself; it may not act for user {requested.user_id!r}")
            if org is None and self.orgs is not None and len(self.orgs) == 1:
                org = next(iter(self.orgs))
            self._check_org(org)
            return UserContext(user_id=self.name, org_id=org, permissions=list(requested.permissions) if requested else [])
        if requested is None:
            raise Forbidden("a service names the user it acts for (user_context)")
        self._check_org(requested.org_id)
        return requested

    def _check_org(self, org: str | None) -> None:
        if self.orgs is None or (org is None and self.kind is CallerKind.AGENT):
            return
        if org not in self.orgs:
            raise Forbidden(f"{self.name} may act for the organisations {', '.join(sorted(self.orgs)) or 'none'} only")

    def may_see(self, owner: Owner) -> bool:
        if self.full_trust:
            return True
        if self.kind is CallerKind.USER:
            return owner.user_id == self.user_id and owner.org_id == self.org_id
        return owner.principal == self.principal and (self.orgs is None or owner.org_id is None or owner.org_id in self.orgs)

    def owner_of(self, user: UserContext) -> Owner:
        """The owner of what this caller creates for ``user`` (as ``acting_for`` gave it)."""
        return Owner(principal=self.principal, user_id=user.user_id, org_id=user.org_id)


@dataclass(frozen=True, slots=True)
class Visibility:
    """``may_see`` as a filter a repository can put in SQL (lists): None in a field means no condition."""

    principal: str | None
    user_id: str | None
    org_id: str | None
    orgs: frozenset[str] | None
    # Users' own rows are matched on user and organisation, where NULL must equal NULL.
    by_user: bool

    @classmethod
    def of(cls, caller: Caller) -> Visibility:
        if caller.full_trust:
            return cls(None, None, None, None, by_user=False)
        if caller.kind is CallerKind.USER:
            return cls(None, caller.user_id, caller.org_id, None, by_user=True)
        return cls(caller.principal, None, None, caller.orgs, by_user=False)
