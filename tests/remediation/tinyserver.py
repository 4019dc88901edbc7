"""Stand-in single-user server for the JupyterHub tests: answers 200 on every path under its prefix.

JupyterHub only needs the spawned process to answer HTTP at ``$JUPYTERHUB_SERVICE_URL`` (``wait_up``);
no notebook server is installed here. Activity is reported to the Hub by the tests themselves through
``POST /hub/api/users/{name}/activity``, as a real single-user server would.
"""

import contextlib
import json
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"version": "tiny"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    url = urlparse(os.environ["JUPYTERHUB_SERVICE_URL"])
    server = ThreadingHTTPServer((url.hostname or "127.0.0.1", url.port or 0), Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
