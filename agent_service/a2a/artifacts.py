"""What a tool made for the user (an ARTIFACT event) as an A2A Artifact of one Part.

A file is a file part (``raw``: its bytes, base64; a text file's text encoded as UTF-8), a link a
``url`` part, both with ``filename`` and ``mediaType``; data is a ``data`` part. The artifact keeps
its id, name and description.
"""

from __future__ import annotations

import base64
from typing import Any

from shared.protocol import ArtifactData


def _part(artifact: ArtifactData) -> dict[str, Any]:
    if artifact.data is not None:
        return {"data": artifact.data, "mediaType": artifact.media_type}
    if artifact.url is not None:
        return {"url": artifact.url, "filename": artifact.name, "mediaType": artifact.media_type}
    raw = artifact.bytes if artifact.bytes is not None else base64.b64encode((artifact.text or "").encode()).decode()
    return {"raw": raw, "filename": artifact.name, "mediaType": artifact.media_type}


def a2a_artifact(artifact: ArtifactData) -> dict[str, Any]:
    out: dict[str, Any] = {"artifactId": artifact.artifact_id, "name": artifact.name, "parts": [_part(artifact)]}
    if artifact.description:
        out["description"] = artifact.description
    return out
