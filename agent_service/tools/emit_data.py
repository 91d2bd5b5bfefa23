"""``emit_data``: structured data (a JSON object) handed to the user beside the answer.

For results a program reads better than prose: a table's rows, figures, a plan. The object is at
most the service's ``artifact_max_bytes`` once serialised.
"""

from __future__ import annotations

from typing import Any, ClassVar

import orjson

from agent_service.tools.artifacts import DESCRIPTION_SCHEMA, description, file_name, new_artifact_id, within
from agent_service.tools.base import Tool, ToolContext, ToolError, ToolOutput
from shared.protocol import ArtifactData

JSON_MEDIA_TYPE = "application/json"


class EmitDataTool(Tool):
    name = "emit_data"
    description = (
        "Hand the user structured data as a JSON object (rows of a table, figures, a plan), shown "
        "beside your answer; clients that are programs read it as it is."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "data": {"type": "object", "description": "The JSON object"},
            "name": {"type": "string", "description": "What it is called, e.g. prices.json", "maxLength": 255},
            "description": DESCRIPTION_SCHEMA,
        },
        "required": ["data"],
        "additionalProperties": False,
    }

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        data = args.get("data")
        if not isinstance(data, dict):
            raise ToolError("'data' (a JSON object) is required")
        try:
            size = len(orjson.dumps(data))
        except TypeError:
            raise ToolError("'data' holds values JSON cannot represent") from None
        within(size, self._max_bytes, "the data")
        name = file_name(args["name"]) if args.get("name") is not None else "data.json"
        artifact = ArtifactData(
            artifact_id=new_artifact_id(), name=name, media_type=JSON_MEDIA_TYPE, data=data,
            description=description(args.get("description")),
        )
        return ToolOutput({"artifact_id": artifact.artifact_id, "name": name, "size": size, "handed_to_user": True},
                          (artifact,))
