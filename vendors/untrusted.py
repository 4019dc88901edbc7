"""Reading files from paths that others can write (HAMi regions written from inside tenant containers, the
host's /proc), so that one hostile or broken file costs one reading, never the poll or the process; and
writing output files into folders that others can write, never through a link they planted.

Every read here looks the path up once without following a final symlink (``O_PATH|O_NOFOLLOW``: a link
to /dev/zero, to another tenant's region or to a host secret is refused), checks what it found with
``fstat`` (a regular file, not a FIFO, device, socket or directory) before opening it for reading (so a
FIFO never blocks the backend's only thread and a device node's driver is never called), opens that same
inode non-blocking, and reads at most a given number of bytes (a huge or growing file never costs more
memory or time than that). Reads use ``read(2)``, never ``mmap``: a file
truncated while mapped would kill the exporter with SIGBUS.

Every output file a command writes (``report -o``/``--csv``, ``report-history -o``, ``remediate --what-if -o``,
``capture``, the generators) goes through ``replacing``/``replace_file``: the content is written to a new
file beside the target (``O_CREAT|O_EXCL|O_NOFOLLOW``, a random name) and renamed over it, and rename(2)
replaces a symbolic link at the target instead of following it. So a link planted in a shared output folder
(``report --csv /tmp/x`` with ``/tmp/x/usage_by_team.csv -> /etc/passwd``) is replaced, not written
through, and a reader never sees a half-written file. A device, FIFO or socket at the target is never
renamed over (refused); only a path the user names with ``-o`` (``write_output``) may be a character device
or a FIFO (``-o /dev/null``, ``-o /dev/stdout``), written in place as a shell would.

Errors are ``OSError`` (``RefusedFile`` for what this module refuses), with a message naming the path and
what is wrong, ready for an error reason or a log line.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

_CHUNK = 65536
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class RefusedFile(OSError):
    """The path is not a regular file (a symlink, FIFO, device, socket, directory) or is over the limit.
    The message is ``{path}: {why}``; ``why`` alone follows a caller's own ``cannot read {path}: ``.
    ``kind`` says what it is instead ("a FIFO", "a symbolic link", ...; None when it is over the limit)."""

    def __init__(self, code: int, path: Path | str, why: str, kind: str | None = None) -> None:
        super().__init__(code, f"{path}: {why}")
        self.why = why
        self.kind = kind

    def __str__(self) -> str:
        return str(self.strerror)  # the message alone, without "[Errno N]"


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def _open_regular(path: Path, follow_symlinks: bool, max_size: int | None = None) -> tuple[int, int]:
    """(a read-only descriptor of the regular file at ``path``, its size as fstat tells: 0 for /proc
    files), the size at most ``max_size``. Raises RefusedFile or OSError.

    The path is first opened with ``O_PATH``, which reaches no driver and no FIFO (a device node a tenant
    made with mknod, say a watchdog, is never opened, so its open has no effect); only once fstat says it is
    a regular file is that same inode opened for reading, through ``/proc/self/fd`` (no second lookup of
    the path, so nothing can be swapped in between). Without O_PATH or /proc, the path is opened again
    non-blocking and checked to be the same inode."""
    o_path = getattr(os, "O_PATH", 0)
    nofollow = 0 if follow_symlinks else os.O_NOFOLLOW
    if not o_path:  # not Linux
        return _checked(path, os.open(path, _FLAGS | nofollow), max_size)
    try:
        pfd = os.open(path, o_path | os.O_CLOEXEC | nofollow)  # a symlink itself, with O_NOFOLLOW
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise RefusedFile(
                errno.ELOOP, path, "is a symbolic link, not followed", "a symbolic link"
            ) from None
        raise
    try:
        st = _check(path, os.fstat(pfd), max_size)
        try:
            fd = os.open(f"/proc/self/fd/{pfd}", _FLAGS)
        except FileNotFoundError:  # no /proc here: open the path again, then make sure it is the same file
            fd = os.open(path, _FLAGS | nofollow)
            again = os.fstat(fd)
            if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino):
                os.close(fd)
                raise RefusedFile(errno.ESTALE, path, "replaced while being opened") from None
    finally:
        os.close(pfd)
    return _checked(path, fd, max_size)


def _check(path: Path, st: os.stat_result, max_size: int | None) -> os.stat_result:
    if stat.S_ISLNK(st.st_mode):
        raise RefusedFile(errno.ELOOP, path, "is a symbolic link, not followed", "a symbolic link")
    if not stat.S_ISREG(st.st_mode):
        kind = _kind(st.st_mode)
        raise RefusedFile(errno.EINVAL, path, f"is {kind}, not a regular file", kind)
    if max_size is not None and st.st_size > max_size:  # refused before reading a byte of it
        raise RefusedFile(errno.EFBIG, path, f"{st.st_size} bytes is over the {max_size}-byte limit")
    return st


def _checked(path: Path, fd: int, max_size: int | None) -> tuple[int, int]:
    """``fd`` and its size once fstat on it says it is a regular file within ``max_size`` (else closed)."""
    try:
        st = _check(path, os.fstat(fd), max_size)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


@contextlib.contextmanager
def opened(path: Path, follow_symlinks: bool = False) -> Iterator[tuple[int, int]]:
    """``with opened(path) as (fd, size)``: the regular file at ``path`` open for reading (checked as
    ``read_capped`` checks it), for a reader that takes only some parts with ``os.pread`` (each read
    bounded by the caller; the file may change meanwhile, so a short read is the caller's to handle)."""
    fd, size = _open_regular(path, follow_symlinks)
    try:
        yield fd, size
    finally:
        os.close(fd)


def _read_upto(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while got < limit:
        data = os.read(fd, min(_CHUNK, limit - got))
        if not data:
            break
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)


def read_capped(path: Path, max_bytes: int, follow_symlinks: bool = False) -> bytes:
    """The whole content of the regular file at ``path``, at most ``max_bytes`` bytes. Reads until end of
    file, so files that report size 0 (/proc) work. Raises RefusedFile for anything but a regular file, a
    symlink (unless ``follow_symlinks``) and a file longer than ``max_bytes``; OSError when it cannot be
    opened or read (ENOENT for a process that exited)."""
    fd, _ = _open_regular(path, follow_symlinks, max_bytes)
    try:
        data = _read_upto(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:  # grew since fstat, or a /proc file
        raise RefusedFile(errno.EFBIG, path, f"over the {max_bytes}-byte limit")
    return data


@contextlib.contextmanager
def replacing(path: Path, binary: bool = False) -> Iterator[IO[Any]]:
    """``with replacing(path) as f``: a new file beside ``path`` open for writing (text, UTF-8, unless
    ``binary``), renamed over ``path`` when the block ends without an error, else removed (``path`` then
    is as it was). A symbolic link at ``path`` is replaced, never followed; the new file's mode is 0666
    less the umask, as ``open(path, "w")`` would create it. Anything at ``path`` that is neither a regular
    file nor a link (a device, a FIFO, a socket) is refused, never renamed over: as root, a rename over
    /dev/null would put a regular file in its place for every process of the host. Raises OSError
    (``IsADirectoryError`` when ``path`` is a folder, ``RefusedFile`` for a device, FIFO or socket)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, f"{path}: is a folder")
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise RefusedFile(errno.EINVAL, path, "not a regular file (a device, FIFO or socket): not replaced")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(temporary, flags, 0o666)
            break
        except FileExistsError:  # 48 random bits taken: draw again
            continue
    try:
        with os.fdopen(fd, "wb" if binary else "w", encoding=None if binary else "utf-8") as out:
            yield out
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def replace_file(path: Path, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` through ``replacing``. Raises OSError."""
    with replacing(path, binary=isinstance(data, bytes)) as out:
        out.write(data)


@contextlib.contextmanager
def writing(path: Path, binary: bool = False) -> Iterator[IO[Any]]:
    """``with writing(path) as f`` for a path the user named on the command line (``-o FILE``). A character
    device or a FIFO there, after following links (``-o /dev/null``, ``-o /dev/stdout``, a named pipe), is
    written in place, as a shell's ``>`` would: the user asked for exactly that stream. Anything else goes
    through ``replacing`` (whole or untouched, a link replaced). Raises OSError."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = 0
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        with open(path, "wb" if binary else "w", encoding=None if binary else "utf-8") as out:
            yield out
        return
    with replacing(path, binary) as out:
        yield out


def write_output(path: Path, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to a path the user named, through ``writing``. Raises OSError."""
    with writing(path, binary=isinstance(data, bytes)) as out:
        out.write(data)
