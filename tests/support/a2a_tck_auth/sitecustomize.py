"""Loaded by the A2A conformance kit's Python (this folder is on its PYTHONPATH, test_a2a_tck.py): every
httpx client the kit makes sends the credential in ``TCK_A2A_API_KEY`` as ``X-API-Key``.

The kit has no option for a credential; with this, it runs against the Agent Service with authentication
on, as an A2A client the operator named (an agent caller, bound to one organisation), so that every
task it creates has an owner and every operation it calls checks it. Nothing else of the kit changes."""

from __future__ import annotations

import os

import httpx

_KEY = os.environ.get("TCK_A2A_API_KEY")

if _KEY:
    _init = httpx.Client.__init__

    def _with_key(self, *args, **kwargs):
        headers = dict(kwargs.pop("headers", None) or {})
        headers.setdefault("X-API-Key", _KEY)
        _init(self, *args, headers=headers, **kwargs)

    httpx.Client.__init__ = _with_key
