"""``python -m shared.healthcheck [URL ...]``: the container image's HEALTHCHECK, with nothing but the
standard library (the image has no curl, and a probe must not import the services).

One image runs either service, so by default it asks both ports the image exposes (the chat's
``/health`` on 8000, the Agent Service's on 8001): healthy when one answers 200, unhealthy when the one
that listens answers anything else or nothing listens. ``HEALTHCHECK_URL`` (comma-separated) or the
arguments name other URLs (a service started with ``--port``).
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

DEFAULT_URLS = ("http://127.0.0.1:8000/health", "http://127.0.0.1:8001/health")
TIMEOUT_S = 3.0


def healthy(urls: list[str], timeout_s: float = TIMEOUT_S) -> tuple[bool, str]:
    """Whether one of ``urls`` answers 200, and what each answered."""
    said = []
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as response:
                if response.status == 200:
                    return True, f"{url}: 200"
                said.append(f"{url}: {response.status}")
        except urllib.error.HTTPError as exc:
            said.append(f"{url}: {exc.code}")
        except (OSError, ValueError) as exc:
            said.append(f"{url}: {type(exc).__name__}")
    return False, "; ".join(said)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    configured = [url.strip() for url in os.environ.get("HEALTHCHECK_URL", "").split(",") if url.strip()]
    ok, said = healthy(args or configured or list(DEFAULT_URLS))
    print(said)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
