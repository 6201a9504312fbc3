"""A real, local web search endpoint in DeepSearchQA's protocol (`POST {query, k}` ->
`{"results": [{title, url, snippet}]}`), for the `WebSearch` backend.

It answers every query with `k` numbered results echoing the query, records each request body
and its headers (names lower-cased), and can be told to send a malformed body. `http.server`
in a daemon thread on 127.0.0.1 with an ephemeral port.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeSearch:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.malformed = False
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                fake.requests.append(body)
                fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                if fake.malformed:
                    payload = b'{"hits": 3}'
                else:
                    k = int(body.get("k", 5))
                    payload = json.dumps({"results": [
                        {"title": f"Result {i} for {body['query']}",
                         "url": f"https://example.invalid/{i}",
                         "snippet": f"snippet {i} about {body['query']}"}
                        for i in range(1, k + 1)]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/search"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeSearch:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
