"""A fake ESP speaking Postmark's HTTP API on 127.0.0.1, answering as scripted per address.

django-anymail's real Postmark backend talks to it (``POSTMARK_API_URL``), so a test
sees exactly what anymail makes of each answer. The local part of the address says
how the ESP answers: ``ok...`` accepts; ``throttled...`` answers 429 (Retry-After: 1)
the first time, then accepts; ``broken...`` answers 500 the first time, then accepts;
``down...`` always answers 500; ``refused...`` answers 422 with Postmark's
inactive-recipient code 406; ``badkey...`` answers 401 (bad server token);
``forbidden...`` answers 403 (a suspended account). Every request is recorded (address,
status). It also answers Postal's send API (``POSTAL_API_URL``), accepting every message.
"""

from __future__ import annotations

import collections
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeEsp:
    """The server and what it answered: ``answers`` is a list of (address, status)."""

    def __init__(self) -> None:
        self.answers: list[tuple[str, int]] = []
        #: The JSON bodies of the requests to Postal's API (which carries no metadata).
        self.postal_requests: list[dict] = []
        self.seen: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()
        esp = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path.endswith("api/v1/send/message"):  # Postal's API
                    esp.postal_requests.append(body)
                    to = body["to"][0]
                    status, headers = 200, {}
                    answer = {
                        "status": "success",
                        "data": {"message_id": "m1", "messages": {to: {"id": 42, "token": "t"}}},
                    }
                else:
                    status, answer, headers = esp.answer(body["To"])
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%s/" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeEsp:
        self.thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, to: str) -> tuple[int, dict, dict[str, str]]:
        """Return (status, JSON body, headers) for a message to ``to``; record it."""
        with self.lock:
            self.seen[to] += 1
            first = self.seen[to] == 1
        local = to.split("@")[0]
        if local.startswith("throttled") and first:
            status, body, headers = (
                429,
                {"ErrorCode": 429, "Message": "Rate limit exceeded"},
                {"Retry-After": "1"},
            )
        elif (local.startswith("broken") and first) or local.startswith("down"):
            status, body, headers = 500, {"ErrorCode": 500, "Message": "Internal error"}, {}
        elif local.startswith("refused"):
            status, headers = 422, {}
            body = {
                "ErrorCode": 406,
                "Message": "You tried to send to a recipient that has been marked as "
                "inactive.\n Found inactive addresses: %s.\n Inactive recipients are ones "
                "that have generated a hard bounce or a spam complaint." % to,
            }
        elif local.startswith("badkey"):
            status, body, headers = 401, {"ErrorCode": 10, "Message": "Bad server token."}, {}
        elif local.startswith("forbidden"):
            status, headers = 403, {}
            body = {"ErrorCode": 403, "Message": "This account is suspended."}
        else:
            status, headers = 200, {}
            body = {
                "To": to,
                "SubmittedAt": "2026-12-05T00:00:00Z",
                "MessageID": str(uuid.uuid4()),
                "ErrorCode": 0,
                "Message": "OK",
            }
        with self.lock:
            self.answers.append((to, status))
        return status, body, headers
