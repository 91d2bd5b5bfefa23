"""OpenID Connect for both services: the identity provider's discovery and keys, access tokens.

- ``settings.OIDCSettings``: issuer, audience, algorithms, leeway, cache lifetimes and the claim
  names (identity providers differ); each service reads it under its own prefix.
- ``provider.IdentityProvider``: the issuer's discovery document (its ``issuer`` must match exactly)
  and JSON Web Key Set, cached, fetched with ``httpx`` off the event loop's critical path: refreshed in
  the background when stale, fetched once (one fetch however many requests wait) for a key id it
  does not know, never more often than the cooldown for that. A provider that is down delays
  nothing that cached keys can answer.
- ``verifier.AccessTokenVerifier``: signature, ``iss``, ``aud``, ``exp``, ``nbf``, ``iat`` with leeway,
  an allowlist of asymmetric algorithms (never ``none``, never HS256).
- ``token_endpoint.TokenEndpoint``: grants at the provider's token endpoint as a confidential client.
- ``client_credentials.ClientCredentialsAuth``: an ``httpx.Auth`` that sends a service's own access
  token (client credentials grant), fetched once and reused until shortly before it expires.

Errors (``errors``)::

    OIDCError
    ├── InvalidToken          the token is not acceptable (401)
    ├── ProviderUnavailable   the identity provider could not be asked, and nothing cached answers (503)
    └── TokenRequestRefused   its token endpoint said no (a refresh token revoked, a wrong client secret)
"""
