"""Reading files others can write (vendors.untrusted): special files are refused without being opened for
reading, symlinks are not followed, reads are bounded, and /proc files (size 0) read whole."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from xpuwatch.vendors.untrusted import RefusedFile, opened, read_capped, replace_file, replacing, write_output


def test_a_fifo_is_never_opened_for_reading(tmp_path: Path) -> None:
    """A writer blocks in open() until some process opens the FIFO for reading: it still blocks after the
    refusal, so the exporter never became a reader (opened, a device node's driver would have run)."""
    fifo = tmp_path / "x.cache"
    os.mkfifo(fifo)
    opened_for_writing = threading.Event()

    def writer() -> None:
        os.close(os.open(fifo, os.O_WRONLY))  # blocks until a reader opens it
        opened_for_writing.set()

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    with pytest.raises(RefusedFile, match=r"x.cache: is a FIFO, not a regular file") as err:
        read_capped(fifo, 4096)
    assert err.value.kind == "a FIFO"
    assert not opened_for_writing.wait(0.5), "the FIFO was opened for reading"
    os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # release the writer
    assert opened_for_writing.wait(10)


def test_symlinks_are_refused_unless_followed(tmp_path: Path) -> None:
    target = tmp_path / "real"
    target.write_bytes(b"secret")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(RefusedFile, match="is a symbolic link, not followed"):
        read_capped(link, 100)
    with pytest.raises(RefusedFile, match="is a symbolic link"), opened(link):
        pass
    assert read_capped(link, 100, follow_symlinks=True) == b"secret"
    (tmp_path / "zero").symlink_to("/dev/zero")
    with pytest.raises(RefusedFile, match="is a device"):
        read_capped(tmp_path / "zero", 100, follow_symlinks=True)


def test_reads_are_bounded(tmp_path: Path) -> None:
    big = tmp_path / "big"
    with open(big, "wb") as f:
        f.truncate(1 << 40)  # 1 TiB, sparse
    with pytest.raises(RefusedFile, match=r"1099511627776 bytes is over the 4096-byte limit"):
        read_capped(big, 4096)
    with opened(big) as (fd, size):
        assert size == 1 << 40 and os.pread(fd, 8, 1 << 39) == b"\0" * 8
    small = tmp_path / "small"
    small.write_bytes(b"12345")
    assert read_capped(small, 5) == b"12345"
    with pytest.raises(RefusedFile, match="over the 4-byte limit"):
        read_capped(small, 4)


def test_proc_files_report_size_zero_and_read_whole() -> None:
    text = read_capped(Path(f"/proc/{os.getpid()}/status"), 65536)
    assert text.startswith(b"Name:") and f"Pid:\t{os.getpid()}\n".encode() in text
    with pytest.raises(RefusedFile, match="over the 8-byte limit"):
        read_capped(Path(f"/proc/{os.getpid()}/status"), 8)


def test_an_output_file_replaces_a_planted_link_and_never_writes_through_it(tmp_path: Path) -> None:
    """Fails with ``Path.write_text`` (what ``report --csv`` used): it wrote through the link, over the file
    the link named (a system file in the break-it round)."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "usage_by_team.csv"
    out.symlink_to(victim)
    replace_file(out, "team,hours\n")
    assert victim.read_text() == "precious\n"
    assert not out.is_symlink() and out.read_text() == "team,hours\n"
    umask = os.umask(0o022)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # as open(path, "w") would have made it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["usage_by_team.csv", "victim"]  # nothing left over


def test_an_output_file_is_whole_or_untouched(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    out.write_text("old\n")
    with pytest.raises(RuntimeError), replacing(out) as f:
        f.write("half of a new")
        raise RuntimeError("failed while rendering")
    assert out.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["report.html"]
    replace_file(out, b"\x00bytes")
    assert out.read_bytes() == b"\x00bytes"
    with pytest.raises(IsADirectoryError):
        replace_file(tmp_path, "x")


def test_a_device_fifo_or_socket_is_never_renamed_over(tmp_path: Path) -> None:
    """A rename over /dev/null (``capture -o /dev/null`` in the suite, as root) put a regular file in its place
    for the whole host; a FIFO stands in for the device here. Refused, and left as it was."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(RefusedFile, match="not a regular file"):
        replace_file(fifo, "x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


def test_a_path_the_user_names_may_be_a_stream(tmp_path: Path) -> None:
    """``-o /dev/stdout`` or a named pipe: written in place, through a link too, as a shell's ``>`` would;
    a regular file named by the user is still replaced whole."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "stdout"
    link.symlink_to(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_output(link, "team,hours\n")
    reader.join(30)
    assert got == [b"team,hours\n"] and link.is_symlink() and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    out = tmp_path / "report.html"
    write_output(out, "<html>")
    assert out.read_text() == "<html>"
