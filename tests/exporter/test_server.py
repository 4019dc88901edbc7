"""The HTTP server in-process on a real loopback socket: faults never stop /metrics, auth, TLS, formats."""

from __future__ import annotations

import asyncio
import base64
import gzip
import ssl
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import bcrypt
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.exporter.fakes import GoodBackend, HangingBackend, RaisingBackend
from xpuwatch.exporter.attribution import StaticAttributionSource
from xpuwatch.exporter.collector import Collector
from xpuwatch.exporter.exposition import ExpositionCache
from xpuwatch.exporter.poller import Poller, PollSettings
from xpuwatch.exporter.server import Server
from xpuwatch.exporter.settings import WebConfig, WebSettings, parse_web_config


def build(backends: list, web_config: WebConfig | None = None, timeout: float = 0.3) -> tuple[Server, Poller]:
    poller = Poller()
    for b in backends:
        poller.add(b, PollSettings(interval=0.05, timeout=timeout))
    import time

    cache = ExpositionCache(Collector("n1", poller.view, StaticAttributionSource(), time.time))
    poller.listeners.append(cache.warm)
    server = Server(cache, poller, WebSettings("127.0.0.1:0"), web_config or WebConfig(), time.time)
    return server, poller


async def started(server: Server, poller: Poller) -> str:
    host, port = await server.start()
    poller.start()
    return f"http://{host}:{port}"


def values(text: str, name: str) -> dict[tuple, float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


async def eventually(fn: Callable[[], object], timeout: float = 10) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        try:
            if await fn():  # type: ignore[misc]
                return
        except AssertionError:
            pass
        if loop.time() > end:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def test_faulty_backends_never_stop_the_server(session: aiohttp.ClientSession) -> None:
    good, hang, broken, crashing = (
        GoodBackend(n=2),
        HangingBackend(),
        RaisingBackend(),
        RaisingBackend("bug", None),
    )
    good.lost.add(1)
    server, poller = build([good, hang, broken, crashing])
    url = await started(server, poller)
    try:

        async def settled() -> bool:
            async with session.get(url + "/metrics") as r:
                assert r.status == 200
                text = await r.text()
            errs = values(text, "xpuwatch_backend_errors_total")
            return bool(errs.get((("backend", "hang"), ("reason", "timeout")))) and bool(
                errs.get((("backend", "bug"), ("reason", "unexpected")))
            )

        await eventually(settled)
        async with session.get(url + "/metrics") as r:
            text = await r.text()
        up = values(text, "xpuwatch_backend_up")
        assert up == {
            (("backend", "good"),): 1.0,
            (("backend", "hang"),): 0.0,
            (("backend", "broken"),): 0.0,
            (("backend", "bug"),): 0.0,
        }
        dev_up = {dict(k)["uuid"]: v for k, v in values(text, "accelerator_up").items()}
        assert dev_up == {
            "GPU-fake-nvidia-0": 1.0,
            "GPU-fake-nvidia-1": 0.0,
        }  # the lost one is 0, others intact
        util = values(text, "accelerator_utilization_ratio")
        assert [dict(k)["uuid"] for k in util] == ["GPU-fake-nvidia-0"]
        errs = values(text, "xpuwatch_backend_errors_total")
        assert errs[(("backend", "hang"), ("reason", "timeout"))] == 1.0  # one stuck call, counted once
        assert errs[(("backend", "broken"), ("reason", "exit_status"))] >= 1
        assert hang.max_active == 1
        async with session.get(url + "/readyz") as r:
            assert r.status == 503
            assert "hang" in await r.text() and "good" not in await r.text()
        async with session.get(url + "/healthz") as r:
            assert r.status == 200
    finally:
        hang.release.set()
        poller.stop()
        await server.stop()


async def test_readyz_gzip_openmetrics_and_landing(session: aiohttp.ClientSession) -> None:
    server, poller = build([GoodBackend()])
    url = await started(server, poller)
    try:

        async def ready() -> bool:
            async with session.get(url + "/readyz") as r:
                return r.status == 200

        await eventually(ready)
        async with session.get(
            url + "/metrics", headers={"Accept-Encoding": "gzip"}, auto_decompress=False
        ) as r:
            assert r.headers["Content-Encoding"] == "gzip"
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            body = gzip.decompress(await r.read()).decode()
        assert "accelerator_utilization_ratio{" in body
        om = "application/openmetrics-text; version=1.0.0; charset=utf-8"
        async with session.get(url + "/metrics", headers={"Accept": om}) as r:
            assert r.headers["Content-Type"].startswith("application/openmetrics-text")
            text = await r.text()
        assert text.endswith("# EOF\n") and "# TYPE accelerator info" in text
        async with session.get(url + "/") as r:
            page = await r.text()
        assert 'href="/metrics"' in page and "<td>good</td><td>up</td><td>2</td>" in page
    finally:
        poller.stop()
        await server.stop()


async def test_basic_auth_with_bcrypt(session: aiohttp.ClientSession) -> None:
    h = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$")  # as htpasswd/Go write
    server, poller = build([GoodBackend()], parse_web_config({"basic_auth_users": {"prom": h}}))
    url = await started(server, poller)
    try:
        async with session.get(url + "/metrics") as r:
            assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Basic")
        async with session.get(url + "/metrics", headers=basic("prom", "wrong")) as r:
            assert r.status == 401
        async with session.get(url + "/metrics", headers=basic("nobody", "s3cret")) as r:
            assert r.status == 401
        for _ in range(2):  # second time from the verified-credential cache
            async with session.get(url + "/healthz", headers=basic("prom", "s3cret")) as r:
                assert r.status == 200
    finally:
        poller.stop()
        await server.stop()


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def self_signed(tmp: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1: with the `cryptography` library when installed, else the
    openssl CLI."""
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    try:
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError:
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
             "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
            check=True, capture_output=True,
        )  # fmt: skip
        return cert, key
    import datetime

    k = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    c = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(k.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(k, hashes.SHA256())
    )
    cert.write_bytes(c.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(
        k.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert, key


async def test_tls_from_web_config(tmp_path: Path, session: aiohttp.ClientSession) -> None:
    cert, key = self_signed(tmp_path)
    cfg = parse_web_config(
        {"tls_server_config": {"cert_file": cert.name, "key_file": key.name}}, base=tmp_path
    )
    server, _poller = build([GoodBackend()], cfg)
    host, port = await server.start()
    try:
        ctx = ssl.create_default_context(cafile=str(cert))
        async with session.get(f"https://{host}:{port}/healthz", ssl=ctx) as r:
            assert r.status == 200 and await r.text() == "ok\n"
        with pytest.raises(aiohttp.ClientError):
            async with session.get(f"http://{host}:{port}/healthz") as r:
                await r.read()
    finally:
        await server.stop()
