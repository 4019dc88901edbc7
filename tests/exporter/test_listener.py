"""The connection guard's rules with a clock passed in and stand-in transports (no sockets; the floods
against the real services are tests/exporter/test_slow_clients.py, tests/relay/test_floods.py,
tests/remediation/test_floods.py): which connection gives way, when timeouts fire, what /metrics says."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, generate_latest

from xpuwatch.exporter.listener import ConnectionGuard, _Guarded


class Transport:
    """Stands in for an asyncio transport: records abort()."""

    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True

    def get_extra_info(self, name: str) -> None:
        return None  # no socket to set SO_LINGER on


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def connect(guard: ConnectionGuard, clock: Clock, at: float) -> tuple[_Guarded, Transport]:
    clock.t = at
    conn = guard.wrap(asyncio.Protocol)()
    assert isinstance(conn, _Guarded)
    transport = Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


def request(
    conn: _Guarded, clock: Clock, at: float, data: bytes = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"
) -> None:
    clock.t = at
    conn.data_received(data)


def answer(guard: ConnectionGuard, conn: _Guarded, clock: Clock, at: float) -> None:
    clock.t = at
    guard.answered(conn.inner)


async def test_a_new_connection_at_the_cap_closes_the_longest_inactive_and_never_a_busy_one() -> None:
    clock = Clock()
    guard = ConnectionGuard(max_connections=8, clock=clock)
    guard.max_connections = 3
    a, ta = connect(guard, clock, 0)
    request(a, clock, 1)
    answer(guard, a, clock, 2)  # idle since 2
    _, tb = connect(guard, clock, 3)  # reading since 3
    c, tc = connect(guard, clock, 4)
    request(c, clock, 4.5)  # busy
    d, td = connect(guard, clock, 5)  # the cap: a (inactive since 2) gives way
    assert (ta.aborted, tb.aborted, tc.aborted, td.aborted) == (True, False, False, False)
    e, te = connect(guard, clock, 6)  # then b (reading since 3)
    assert (tb.aborted, te.aborted) == (True, False)
    request(d, clock, 7)
    request(e, clock, 7)
    _, tf = connect(guard, clock, 8)  # c, d, e all busy: the new one is refused
    assert tf.aborted and not (tc.aborted or td.aborted or te.aborted)
    assert guard.closed == {
        "evicted": 2,
        "header_timeout": 0,
        "idle_timeout": 0,
        "write_timeout": 0,
        "full": 1,
    }
    assert (guard.count("reading"), guard.count("busy"), guard.count("idle")) == (0, 3, 0)
    guard.stop()


async def test_a_second_request_starts_a_new_header_timeout_and_idle_connections_time_out() -> None:
    clock = Clock()
    guard = ConnectionGuard(header_timeout=10, keepalive_timeout=75, clock=clock)
    slow, t_slow = connect(guard, clock, 0)
    request(slow, clock, 1)
    answer(guard, slow, clock, 2)
    request(slow, clock, 100, b"GET / HTTP/1.1\r\nHost:")  # a partial second request, reading since 100
    idle, t_idle = connect(guard, clock, 50)
    request(idle, clock, 50, b"GET / HTTP/1.1\nHost: x\n\n")  # bare-LF header: complete too
    answer(guard, idle, clock, 51)  # idle since 51
    busy, t_busy = connect(guard, clock, 0)
    request(busy, clock, 0)  # busy since 0: a handler may take long; never timed out by the guard
    clock.t = 110
    guard._sweep()
    assert (t_slow.aborted, t_idle.aborted, t_busy.aborted) == (False, False, False)
    clock.t = 110.5
    guard._sweep()
    assert t_slow.aborted and guard.closed["header_timeout"] == 1
    clock.t = 126.5
    guard._sweep()
    assert t_idle.aborted and guard.closed["idle_timeout"] == 1
    assert not t_busy.aborted
    guard.stop()


async def test_the_collector_reports_states_closes_and_accept_errors() -> None:
    clock = Clock()
    guard = ConnectionGuard(max_connections=40, clock=clock)
    a, _ = connect(guard, clock, 0)
    request(a, clock, 0)
    connect(guard, clock, 1)
    guard.accept_failed(OSError(24, "Too many open files"))
    registry = CollectorRegistry()
    registry.register(guard.collector())
    text = generate_latest(registry).decode()
    for line in (
        'xpuwatch_http_connections{state="reading"} 1.0',
        'xpuwatch_http_connections{state="busy"} 1.0',
        'xpuwatch_http_connections{state="idle"} 0.0',
        "xpuwatch_http_max_connections 40.0",
        'xpuwatch_http_connections_closed_total{reason="evicted"} 0.0',
        'xpuwatch_http_accept_errors_total{errno="EMFILE"} 1.0',
    ):
        assert line in text.splitlines(), line
    guard.stop()


async def test_out_of_descriptors_lowers_the_cap_for_a_minute_and_closes_the_longest_inactive() -> None:
    clock = Clock()
    guard = ConnectionGuard(max_connections=40, clock=clock)
    idle = []
    for i in range(20):
        conn, transport = connect(guard, clock, i)
        request(conn, clock, i)
        answer(guard, conn, clock, i)
        idle.append(transport)
    busy = []
    for i in range(10):
        conn, transport = connect(guard, clock, 20 + i)
        request(conn, clock, 20 + i)
        busy.append(transport)
    clock.t = 30
    assert guard.out_of_descriptors()  # 30 held less FD_SPARE (16): the cap is 14, 13 held leave room
    assert guard.max_connections == 14 and guard.held == 13
    assert [t.aborted for t in idle] == [True] * 17 + [False] * 3  # the longest idle went first
    assert not any(t.aborted for t in busy)
    clock.t = 90
    guard._sweep()
    assert guard.max_connections == 14  # within a minute of the error
    clock.t = 90.5
    guard._sweep()
    assert guard.max_connections == 40
    guard.stop()


async def test_an_answer_waiting_for_its_client_is_evictable_and_timed_out() -> None:
    """Fails on main: a connection was busy until its answer was written, so clients that never read held
    every slot (600 of them kept /healthz out for 40 s), and nothing timed the write out."""
    clock = Clock()
    guard = ConnectionGuard(max_connections=8, keepalive_timeout=75, write_timeout=60, clock=clock)
    guard.max_connections = 3
    stuck, t_stuck = connect(guard, clock, 0)
    request(stuck, clock, 0)
    clock.t = 1
    stuck.pause_writing()  # the kernel's buffers are full: the client does not read
    slow, t_slow = connect(guard, clock, 2)
    request(slow, clock, 2)
    clock.t = 3
    slow.pause_writing()
    clock.t = 4
    slow.resume_writing()  # it reads a little: busy again, but its write deadline still runs from 3
    busy, t_busy = connect(guard, clock, 5)
    request(busy, clock, 5)
    assert (guard.count("sending"), guard.count("busy")) == (1, 2)
    _, t_new = connect(guard, clock, 6)  # the cap: the answer waiting longest for its client gives way
    assert (t_stuck.aborted, t_slow.aborted, t_busy.aborted, t_new.aborted) == (True, False, False, False)
    clock.t = 62
    guard._sweep()
    assert not t_slow.aborted
    clock.t = 63.5  # 60 s after its first pause, though it read in between: closed
    guard._sweep()
    assert t_slow.aborted and not t_busy.aborted
    assert guard.closed["write_timeout"] == 1 and guard.closed["evicted"] == 1
    guard.stop()


async def test_an_answer_written_ends_its_write_deadline() -> None:
    clock = Clock()
    guard = ConnectionGuard(keepalive_timeout=500, write_timeout=60, clock=clock)
    conn, transport = connect(guard, clock, 0)
    request(conn, clock, 0)
    clock.t = 1
    conn.pause_writing()
    clock.t = 30
    conn.resume_writing()
    answer(guard, conn, clock, 31)  # written: idle, no deadline any more
    request(conn, clock, 100)  # the next request of the kept-alive connection
    clock.t = 200
    guard._sweep()
    assert not transport.aborted and guard.count("busy") == 1
    clock.t = 201
    conn.pause_writing()  # its own deadline, from now
    clock.t = 260
    guard._sweep()
    assert not transport.aborted
    clock.t = 261.5
    guard._sweep()
    assert transport.aborted and guard.closed["write_timeout"] == 1
    guard.stop()
