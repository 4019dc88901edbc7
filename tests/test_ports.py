"""The tests' port helper never gives two servers the same port."""

from __future__ import annotations

import socket

from tests.ports import free_port


def test_free_port_never_repeats_and_each_port_binds() -> None:
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == 200
    for port in ports[:20]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
