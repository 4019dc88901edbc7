"""exporter.validation: the checks every service's settings parser shares, value in, value or error out."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from xpuwatch.exporter import validation


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (1, True),
        (3600, True),
        (0.5, True),
        (3600.5, False),
        (0, False),  # low_open
        (math.inf, False),
        (math.nan, False),
        (10**400, False),
        (True, False),
        ("5", False),
        (None, False),
    ],
)
def test_number(value: object, ok: bool) -> None:
    def check() -> float:
        return validation.number(value, "k.interval", low=0, high=3600, low_open=True, unit="seconds")

    if ok:
        assert check() == float(value)  # type: ignore[arg-type]
    else:
        with pytest.raises(ValueError) as err:
            check()
        assert str(err.value) == f"k.interval: must be a number > 0 and <= 3600 (seconds), got {value!r}"


def test_number_integer_and_bounds_shown_plainly() -> None:
    with pytest.raises(ValueError, match=r"^b: must be a whole number >= 1024 and <= 1073741824 \(bytes\)"):
        validation.number(1.5e9, "b", low=1024, high=validation.GIB, integer=True, unit="bytes")
    assert validation.number(2048, "b", low=1024, high=validation.GIB, integer=True) == 2048.0


@pytest.mark.parametrize(
    "url",
    ["http://relay:9852/x", "https://am.example:9093", "http://user:pw@127.0.0.1:1/a?b=c", "HTTPS://h"],
)
def test_http_url_accepts(url: str) -> None:
    assert validation.http_url(url, "u") == url


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "file:///etc/passwd",
        "ftp://host/x",
        "http://",
        "relay:9852",
        "127.0.0.1:6443",
        " http://h",
        "http://h/a b",
        "http://h/\r\nx",
        "http://h:99999/",
        "",
        5,
        None,
    ],
)
def test_http_url_refuses(url: object) -> None:
    with pytest.raises(ValueError, match=r"^u: "):
        validation.http_url(url, "u")


def test_header_fields() -> None:
    assert validation.header_value("default-src 'self';\tframe-ancestors 'none'", "h") is not None
    assert validation.header_value("max-age=31536000; 中文", "h")  # obs-text is not a control character
    for bad in ("a\rb", "a\nb", "a\x00", "a\x7f", "a\x1b[31m"):
        with pytest.raises(ValueError, match=r"^h: an HTTP header value may not hold control characters"):
            validation.header_value(bad, "h")
    with pytest.raises(ValueError, match=r"^h: must be a string"):
        validation.header_value(1, "h")
    assert validation.header_name("X-Frame-Options", "h") == "X-Frame-Options"
    for bad_name in ("X-Frame-Options ", "X:Y", "", "X\r\nY", "Ä"):
        with pytest.raises(ValueError, match=r"^h: .* is not an HTTP header name"):
            validation.header_name(bad_name, "h")


def test_config_files_are_read_safely_and_each_failure_names_the_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One reader for every config file: a FIFO or device named by mistake is refused without blocking
    (``serve --config`` on a FIFO hung), a binary file is named (a binary web config ended the exporter with a
    traceback), a symlink is followed (a ConfigMap mount is one), and the size is bounded."""
    good = tmp_path / "good.yaml"
    good.write_text("a: yes\nb: true\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(good)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    binary = tmp_path / "bin"
    binary.write_bytes(b"\x7fELF\x02\x01\xff\xfe")
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1,\n")
    # YAML 1.2 booleans for our configs; PyYAML's (1.1) reading for a foreign file, as Go's YAML reads it.
    assert validation.yaml_file(link, "--config") == {"a": "yes", "b": True}
    assert validation.yaml_file(good, "--config", foreign=True) == {"a": True, "b": True}
    cases = [
        (fifo, f"--config: cannot read {fifo}: is a FIFO, not a regular file"),
        (Path("/dev/zero"), "--config: cannot read /dev/zero: is a device, not a regular file"),
        (tmp_path, f"--config: cannot read {tmp_path}: is a directory, not a regular file"),
        (tmp_path / "missing", f"--config: cannot read {tmp_path / 'missing'}: No such file or directory"),
        (binary, f"--config: {binary} is not UTF-8 text (invalid start byte at byte 6)"),
        (
            broken,
            f"--config: {broken} is not valid YAML: line 2, column 1: expected the node content, but found",
        ),
    ]
    for path, message in cases:
        with pytest.raises(ValueError) as err:
            validation.yaml_file(path, "--config")
        assert str(err.value).startswith(message), str(err.value)
    monkeypatch.setattr(validation, "MAX_CONFIG_BYTES", 8)
    with pytest.raises(
        ValueError, match=rf"^--config: cannot read {good}: 15 bytes is over the 8-byte limit$"
    ):
        validation.yaml_file(good, "--config")


def test_secret_text(tmp_path: Path) -> None:
    (tmp_path / "t").write_text(" tok \n")
    (tmp_path / "e").write_text(" \n")
    (tmp_path / "b").write_bytes(b"\xff\xfe")
    assert validation.secret_text(tmp_path / "t", "k") == "tok"
    with pytest.raises(ValueError, match=r"^k: .*/e is empty$"):
        validation.secret_text(tmp_path / "e", "k")
    with pytest.raises(ValueError, match=r"^k: .*/b is not UTF-8 text"):
        validation.secret_text(tmp_path / "b", "k")
    with pytest.raises(ValueError, match=r"^k: cannot read .*/missing: No such file"):
        validation.secret_text(tmp_path / "missing", "k")
    os.mkfifo(tmp_path / "fifo")  # a token "file" nobody writes: refused, never waited on
    with pytest.raises(ValueError, match=r"^k: cannot read .*/fifo: is a FIFO, not a regular file$"):
        validation.secret_text(tmp_path / "fifo", "k")
