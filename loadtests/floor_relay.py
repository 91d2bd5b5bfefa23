"""The least a streaming relay can do per token, for ``bench_floor``: read the model's stream and
write each token to the client as one SSE event, with nothing else (no database, no envelope, no
metrics, no middleware).

    python -m loadtests.floor_relay --model http://127.0.0.1:PORT --port 8990 [--workers N]

A raw ASGI app under the services' own server settings (uvicorn with uvloop and httptools) and
aiohttp for the model's stream, as the Agent Service reads it. What it costs per event on this
machine is the floor under the services' figures: a socket read of the model's chunk and a socket
write to the client per token, and the event loop's turn between them.
"""

from __future__ import annotations

import argparse
import json
import os

import aiohttp
import uvicorn

REQUEST = {"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "Tell me something."}]}


class FloorRelay:
    def __init__(self, model_url: str) -> None:
        self._url = f"{model_url}/v1/chat/completions"
        self._session: aiohttp.ClientSession | None = None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    assert self._session is not None
                    await self._session.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["path"] == "/health":
            await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        await self._relay(send)

    async def _relay(self, send) -> None:
        assert self._session is not None
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        seq = 0
        async with self._session.post(self._url, json=REQUEST) as response:
            async for line in response.content:
                if not line.startswith(b"data: {"):
                    continue
                choices = json.loads(line[6:])["choices"]
                text = choices[0]["delta"].get("content") if choices else None
                if text:
                    seq += 1
                    event = b"id: %d\nevent: ANSWER_CHUNK\ndata: %s\n\n" % (seq, json.dumps({"text": text}).encode())
                    await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"event: COMPLETE\ndata: {}\n\n", "more_body": False})


def create() -> FloorRelay:
    """The app of each worker process (uvicorn imports it by name when there are several)."""
    return FloorRelay(os.environ["FLOOR_RELAY_MODEL_URL"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model", required=True, help="base URL of the OpenAI-compatible model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8990)
    parser.add_argument("--workers", type=int, default=1, help="processes sharing the port, as the services' workers")
    args = parser.parse_args()
    os.environ["FLOOR_RELAY_MODEL_URL"] = args.model
    # Keep-alive as long as the services' (75 s): with uvicorn's 5 s a pooled connection idle through a round
    # could be closed by the relay just as the client reused it ("Server disconnected without sending a response").
    uvicorn.run("loadtests.floor_relay:create", factory=True, workers=args.workers, host=args.host, port=args.port,
                log_level="warning", access_log=False, timeout_keep_alive=75)


if __name__ == "__main__":
    main()
