"""CLI: bad config fails at start naming the key; inspect; capture -> redact -> replay round trip; docs."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from tests.exporter.conftest import ROOT, Exporter, cli_env, run_cli
from xpuwatch.exporter.capture import Redactor, capture, redact
from xpuwatch.exporter.cli import Clocks, assemble, inspect_files
from xpuwatch.exporter.reference import render_markdown
from xpuwatch.exporter.settings import Settings
from xpuwatch.vendors import registry
from xpuwatch.vendors.base import BackendError, Device, DeviceSample, ParseError
from xpuwatch.vendors.command import ReplayRunner, SubprocessRunner, read_bundle, write_bundle
from xpuwatch.vendors.registry import BackendContext, BackendSpec, Detection, OutputFormat


@pytest.mark.slow
def test_unknown_backend_names_where_it_was_set(tmp_path: Path) -> None:
    """A typo in XPUWATCH_ENABLE was reported as `--backend: ...`, a flag the user never gave."""
    (tmp_path / "c.yaml").write_text("enable: [nvidai]\n")
    for args, env, source in (
        (["--backend", "nvidai"], {}, "--backend"),
        ([], {"XPUWATCH_ENABLE": "nvidai"}, "XPUWATCH_ENABLE"),
        (["--config", str(tmp_path / "c.yaml")], {}, "enable"),
    ):
        res = run_cli("serve", *args, env={**cli_env(), **env})
        assert res.returncode == 2, res.stderr
        assert res.stderr.startswith(f"xpuwatch: config error: {source}: unknown backend 'nvidai'"), (
            res.stderr
        )


@pytest.mark.parametrize(
    ("args", "files", "message"),
    [
        (
            ["--config", "{d}/c.yaml"],
            {"c.yaml": "backends: {sim: {interval: -1}}"},
            "backends.sim.interval: must be a number > 0",
        ),
        (["--config", "{d}/c.yaml"], {"c.yaml": "web: {listen_addr: ':1'}"}, "web.listen_addr: unknown key"),
        (["--web.listen-address", "nohost"], {}, "web.listen_address: 'nohost' is not [host]:port"),
        (
            ["--simulate", "--sim-config", "{d}/s.yaml"],
            {"s.yaml": "timeline: [{at: 0, device: '0', fault: melt}]"},
            "timeline[0].fault: 'melt'",
        ),
        (["--backend", "nosuch"], {}, "--backend: unknown backend 'nosuch'"),
        (
            ["--web.config.file", "{d}/w.yaml"],
            {"w.yaml": "basic_auth_users: {u: pw}"},
            "basic_auth_users.u: must be a bcrypt hash",
        ),
        (
            ["--web.config.file", "{d}/w.yaml"],
            {"w.yaml": "tls_server_config: {cert_file: w.yaml, key_file: w.yaml}"},
            "tls_server_config: cannot load certificate/key",
        ),
    ],
)
def test_bad_config_fails_at_start_naming_the_key(
    tmp_path: Path, args: list[str], files: dict, message: str
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    res = run_cli("serve", *[a.format(d=tmp_path) for a in args])
    assert res.returncode == 2, res.stderr
    assert message in res.stderr
    assert "Traceback" not in res.stderr


# A one-line-per-device tool output: "<uuid> <serial> <util%> <host>"; the format is a test stand-in.
def _parse_fake(text: str) -> Sequence[DeviceSample]:
    out = []
    for i, line in enumerate(text.splitlines()):
        parts = line.split()
        if len(parts) != 4 or not parts[2].isdigit():
            raise ParseError(f"line {i + 1}: expected '<uuid> <serial> <util%> <host>'")
        out.append(
            DeviceSample(
                Device("fakevendor", "Fake X1", str(i), parts[0], serial=parts[1]),
                utilization_ratio=int(parts[2]) / 100,
            )
        )
    return out


FAKE_FORMAT = OutputFormat("fake-tool-text", _parse_fake, lambda t: t.startswith("GPU-"))


class FakeToolBackend:
    """Runs the `faketool` command through the injected runner, like every CLI backend."""

    name = "faketool"

    def __init__(self, ctx: BackendContext) -> None:
        self.runner = ctx.runner

    def open(self) -> None:
        pass

    def sample(self) -> Sequence[DeviceSample]:
        return _parse_fake(self.runner.run(["faketool", "--query"], timeout=5).stdout)

    def close(self) -> None:
        pass


@pytest.fixture
def fake_spec(monkeypatch: pytest.MonkeyPatch) -> BackendSpec:
    spec = BackendSpec(
        "faketool", "fakevendor", FakeToolBackend, lambda ctx: Detection(True, "test"), formats=(FAKE_FORMAT,)
    )
    registry.all_specs()
    monkeypatch.setitem(registry._SPECS, "faketool", spec)
    return spec


def test_inspect_detects_format_and_prints_exposition(tmp_path: Path, fake_spec: BackendSpec) -> None:
    f = tmp_path / "out.txt"
    f.write_text("GPU-11111111-2222-3333-4444-555555555555 S123 87 h\n")
    body, errors = inspect_files([str(f)], None, "n1")
    assert errors == []
    text = body.decode()
    assert (
        'accelerator_utilization_ratio{device="0",model="Fake X1",node="n1",'
        'uuid="GPU-11111111-2222-3333-4444-555555555555",vendor="fakevendor"} 0.87\n'
    ) in text
    assert "xpuwatch_" not in text
    g = tmp_path / "garbage.txt"
    g.write_text("hello")
    _, errors = inspect_files([str(g)], None, "n1")
    known = registry.all_formats()
    assert errors == [
        f"{g}: no known format matches (tried {len(known)}: {', '.join(sorted(known))}); pass --format NAME"
    ]
    _, errors = inspect_files([str(g)], "fake-tool-text", "n1")
    assert errors == [f"{g}: not valid fake-tool-text: line 1: expected '<uuid> <serial> <util%> <host>'"]
    _, errors = inspect_files([str(g)], "nope", "n1")
    assert errors[0].startswith("--format: unknown format 'nope'")


def test_inspect_cli_exits_nonzero_when_nothing_matches(tmp_path: Path) -> None:
    g = tmp_path / "garbage.txt"
    g.write_text("\x00\x01 not a vendor tool output")
    res = run_cli("inspect", str(g))
    assert res.returncode == 1
    assert f"{g}: no known format matches" in res.stderr


def test_capture_redact_replay_round_trip(tmp_path: Path, fake_spec: BackendSpec) -> None:
    tool = tmp_path / "bin" / "faketool"
    tool.parent.mkdir()
    tool.write_text(
        "#!/bin/sh\n"
        "echo 'GPU-aaaaaaaa-2222-3333-4444-555555555555 SN998877 40 gpu-node-7'\n"
        "echo 'GPU-bbbbbbbb-2222-3333-4444-555555555555 SN112233 90 10.1.2.3'\n"
    )
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    runner = SubprocessRunner(env={**os.environ, "PATH": f"{tool.parent}:{os.environ['PATH']}"})
    cap = capture(
        [fake_spec], [("nvml", "libnvidia-ml.so.1 not found")], runner, "gpu-node-7", clock=lambda: 5.0
    )
    assert cap.meta["backends"] == ["faketool"] and cap.meta["errors"] == {}
    assert cap.meta["skipped"] == {"nvml": "libnvidia-ml.so.1 not found"}
    assert cap.meta["tools"] == {"faketool": str(tool)}
    assert [r.argv for r in cap.results] == [("faketool", "--query")]
    red = redact(cap, "gpu-node-7")
    out = red.results[0].stdout
    assert out == (
        "GPU-00000000-0000-0000-0000-000000000001 SERIAL0001 40 host-1\n"
        "GPU-00000000-0000-0000-0000-000000000002 SERIAL0002 90 192.0.2.2\n"
    )
    assert red.meta["redacted"] is True and red.meta["node"] == "host-1"
    bundle = tmp_path / "bundle.json"
    write_bundle(bundle, red.results, red.meta)
    meta, results = read_bundle(bundle)
    asm = assemble(
        Settings(), meta["backends"], Clocks(lambda: 5.0, lambda: 0.0), ReplayRunner(results), "host-1"
    )
    asm.poller.pollers[0].poll_once()
    (view,) = asm.poller.view(5.0)
    assert [(s.device.uuid, s.utilization_ratio) for s in view.samples] == [
        ("GPU-00000000-0000-0000-0000-000000000001", 0.4),
        ("GPU-00000000-0000-0000-0000-000000000002", 0.9),
    ]
    body = asm.cache.get("", "").body.decode()
    assert 'node="host-1"' in body and 'uuid="GPU-00000000-0000-0000-0000-000000000002"' in body


def test_redactor_is_consistent_across_texts() -> None:
    r = Redactor(hostnames=["node-a"], serials=["1320921012345"])
    a = r.text("uuid GPU-ABCDEF01-2222-3333-4444-555555555555 on node-a (10.0.0.5) serial 1320921012345")
    b = r.text(
        "<uuid>GPU-abcdef01-2222-3333-4444-555555555555</uuid><serial>1320921012345</serial> node-a.local"
    )
    assert a == "uuid GPU-00000000-0000-0000-0000-000000000001 on host-1 (192.0.2.2) serial SERIAL0001"
    assert (
        b == "<uuid>GPU-00000000-0000-0000-0000-000000000001</uuid><serial>SERIAL0001</serial> host-1.local"
    )
    assert (
        r.text("Serial Number : 0323119087654\nlocalhost 127.0.0.1")
        == "Serial Number : SERIAL0002\nlocalhost 127.0.0.1"
    )


def test_redactor_keeps_serial_fields_that_hold_no_serial() -> None:
    # rocm-smi prints "Serial Number": "N/A" on Radeon cards: masking it would invent a serial on replay.
    r = Redactor()
    text = '"Serial Number": "N/A", <serial>[Not Supported]</serial> "Serial Number": "TPX1234"'
    assert (
        r.text(text)
        == '"Serial Number": "N/A", <serial>[Not Supported]</serial> "Serial Number": "SERIAL0001"'
    )


def test_redactor_masks_known_serials_as_whole_tokens_only() -> None:
    # nvidia-smi's zeroed serial must not eat into rocm-smi's zero Unique ID (which then read as non-zero).
    r = Redactor(serials=["0000000000000"])
    text = "<serial>0000000000000</serial> Unique ID: 0x0000000000000000, sn 0000000000000."
    assert r.text(text) == "<serial>SERIAL0001</serial> Unique ID: 0x0000000000000000, sn SERIAL0001."


def test_redactor_keeps_dotted_quad_versions() -> None:
    # xpu-smi's driver version is a dotted quad: only addresses are masked, never versions.
    r = Redactor()
    text = "Driver Version: 5.0.21.21  XPU-RT Version: 5.0.21 | peer 10.1.2.3"
    assert r.text(text) == "Driver Version: 5.0.21.21  XPU-RT Version: 5.0.21 | peer 192.0.2.2"


def test_metrics_doc_is_current() -> None:
    committed = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert committed == render_markdown(), "docs/metrics.md is stale: run `xpuwatch metrics-doc`"


def test_metrics_doc_check_cli(tmp_path: Path) -> None:
    (tmp_path / "m.md").write_text("old")
    res = run_cli("metrics-doc", "--check", "-o", str(tmp_path / "m.md"))
    assert res.returncode == 1 and f"{tmp_path / 'm.md'} is stale" in res.stderr


def test_detection_logs_found_and_skipped(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import argparse
    import logging

    from xpuwatch.exporter.cli import _backend_names

    registry.all_specs()
    monkeypatch.setitem(
        registry._SPECS,
        "present",
        BackendSpec("present", "v", FakeToolBackend, lambda c: Detection(True, "tool on PATH")),
    )
    monkeypatch.setitem(
        registry._SPECS,
        "absent",
        BackendSpec("absent", "v", FakeToolBackend, lambda c: Detection(False, "absent-smi not found")),
    )
    with caplog.at_level(logging.INFO, logger="xpuwatch"):
        names = _backend_names(argparse.Namespace(), Settings(), SubprocessRunner())
    assert "present" in names and "absent" not in names
    assert "backend absent: skipped (absent-smi not found)" in caplog.text
    assert "backend present: found" in caplog.text
    assert _backend_names(argparse.Namespace(), Settings(enable=("sim",)), SubprocessRunner()) == ["sim"]


@pytest.mark.slow
def test_serve_replay_cli_uses_the_bundle_backends_and_node(
    tmp_path: Path, start_exporter: Callable[..., Exporter]
) -> None:
    import json
    import urllib.request

    from tests.exporter.conftest import GOLDEN_CLOCK, wait_ready

    bundle = tmp_path / "b.json"
    write_bundle(bundle, [], {"backends": ["sim"], "node": "replayed-node"})
    exp = start_exporter("--replay", str(bundle), "--sim-clock", GOLDEN_CLOCK)
    wait_ready(exp)
    with urllib.request.urlopen(exp.url + "/metrics", timeout=10) as r:
        body = r.read().decode()
    assert 'xpuwatch_backend_up{backend="sim"} 1.0' in body
    assert 'accelerator_up{device="0",model="NVIDIA A100-SXM4-80GB",node="replayed-node"' in body
    (tmp_path / "empty.json").write_text(json.dumps({"xpuwatch_capture": 1, "meta": {}, "commands": []}))
    res = run_cli("serve", "--replay", str(tmp_path / "empty.json"))
    assert res.returncode == 2 and "the bundle names no backend to replay" in res.stderr
    (tmp_path / "bad.json").write_text("{")
    res = run_cli("serve", "--replay", str(tmp_path / "bad.json"))
    assert res.returncode == 2 and "not a readable capture bundle" in res.stderr


def test_capture_cli_writes_a_bundle(tmp_path: Path) -> None:
    out = tmp_path / "cap.json"
    res = run_cli("capture", "-o", str(out), "--redact", "--node-name", "node-x")
    assert res.returncode == 0, res.stderr
    meta, _results = read_bundle(out)
    assert meta["redacted"] is True and meta["node"] == "host-1"
    assert set(meta) >= {"backends", "skipped", "errors", "started", "finished", "tool_versions", "tools"}


def test_recording_runner_keeps_failed_calls_and_replay_fails_them_alike(tmp_path: Path) -> None:
    from xpuwatch.vendors.command import RecordingRunner

    tool = tmp_path / "npu-smi"
    tool.write_text("#!/bin/sh\necho 'Invalid card id.' >&2\nexit 1\n")
    tool.chmod(0o755)
    recorder = RecordingRunner(SubprocessRunner())
    with pytest.raises(BackendError, match=r"exited 1: Invalid card id\.") as live:
        recorder.run([str(tool), "info", "-i", "9"], timeout=5)
    assert live.value.reason == "exit_status"
    [kept] = recorder.results
    assert (kept.returncode, kept.stderr) == (1, "Invalid card id.\n")
    with pytest.raises(BackendError) as replayed:
        ReplayRunner(recorder.results).run(["npu-smi", "info", "-i", "9"], timeout=5)
    assert replayed.value.reason == "exit_status"


@pytest.mark.slow
def test_bad_inputs_fail_with_one_line_naming_the_cause(tmp_path: Path) -> None:
    """Ugly cases a new user hit: each is one clear line and a non-zero exit, never a traceback."""
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00bad")
    unknown = tmp_path / "unknown-backend.yaml"
    unknown.write_text("backends:\n  nosuch: {interval: 3}\n")
    typo = tmp_path / "typo.yaml"
    typo.write_text("enable: [nvidiaa]\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("foo: [unclosed\n")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # nobody writes it: a reader that opens it for reading blocks (run_cli's 60 s timeout)
    cases = [
        (("serve", "--simulate", "--config", str(fifo)), f"--config: cannot read {fifo}: is a FIFO"),
        (
            ("serve", "--simulate", "--sim-config", str(fifo)),
            f"sim config {fifo}: cannot read: is a FIFO, not a regular file",
        ),
        (
            ("serve", "--simulate", "--web.config.file", str(binary)),
            f"web.config_file: {binary} is not UTF-8",
        ),
        (("serve", "--simulate", "--config", str(typo)), "enable: unknown backend 'nvidiaa'"),
        (("serve", "--config", str(broken)), "not valid YAML: line 2, column 1: expected ',' or ']'"),
        (("serve", "--simulate", "--sim-config", str(broken)), "not valid YAML: line 2, column 1: expected"),
        (("serve", "--config", str(binary)), "is not UTF-8 text"),
        (("serve", "--simulate", "--sim-config", str(binary)), "sim config"),
        (("serve", "--simulate", "--config", str(unknown)), "backends.nosuch: unknown backend"),
        (("serve", "--simulate", "--backend", "nvml"), "--backend: not with --simulate"),
        (("inspect",), "give one or more FILEs"),
        (("metrics-doc", "--check", "-o", str(tmp_path / "missing.md")), "not found"),
    ]
    for argv, message in cases:
        res = run_cli(*argv)
        assert res.returncode != 0, argv
        assert message in res.stderr and "Traceback" not in res.stderr, (argv, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1, (argv, res.stderr)


def test_inspect_lists_its_formats() -> None:
    res = run_cli("inspect", "--list-formats")
    names = res.stdout.split()
    assert res.returncode == 0 and {"nvidia-smi-xml", "npu-smi-info", "amd-smi-json", "cnmon-table"} <= set(
        names
    )


def test_inspect_says_when_a_file_reads_but_lists_no_device(tmp_path: Path) -> None:
    """`nvidia-smi -q -x` on a node whose driver sees no GPU reads fine and lists nothing: inspect printed
    nothing at all and exited 0, leaving the user to guess (new-user finding). Now a note says so."""
    x = tmp_path / "zero.xml"
    x.write_text(
        '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n<nvidia_smi_log>\n'
        "<timestamp>Wed Dec  2 06:00:00 2026</timestamp>\n<driver_version>550.54.15</driver_version>\n"
        "<cuda_version>12.4</cuda_version>\n<attached_gpus>0</attached_gpus>\n</nvidia_smi_log>\n"
    )
    notes: list[str] = []
    body, errors = inspect_files([str(x)], None, "n1", notes=notes)
    assert errors == []
    assert notes == [f"{x}: read as nvidia-smi-xml, which lists no device: nothing to show"]
    assert b"accelerator_" not in body
