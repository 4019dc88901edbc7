"""TCP ports on 127.0.0.1 for the real servers the tests start (Prometheus, Alertmanager, stand-ins).

The kernel's pick for port 0 is free a moment ago, but it may hand the same port out again once
the probing socket closes; two servers of one test then race for it (CI saw the demo's exporter
and relay given one port). ``free_port`` remembers every port it returned in this process and
never returns one twice.
"""

from __future__ import annotations

import socket

_handed_out: set[int] = set()


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago and that this process was never given before."""
    held: list[socket.socket] = []
    try:
        while True:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(s)
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    finally:
        for s in held:
            s.close()
