"""Fake vendor tools for exporter tests: tiny executables on PATH that stand in for nvidia-smi, cnmon, mx-smi...

Each stands for the vendor's real command-line tool at its process boundary (argv in, stdout/stderr and exit
status out), as the real subprocess path (``vendors.command.SubprocessRunner``) sees it: it prints a real
captured output (tests/fixtures/<vendor>/, provenance in each ``.source`` note), or misbehaves the way the
issue lists (hangs, exits 1 with a usage text, prints garbage). The tool -> fixture table is the mixed-node
bundle's (scripts/mixed_bundle.py), so fake tools and the committed bundle answer the same.
"""

from __future__ import annotations

import importlib.util
import shlex
import shutil
import sys
from pathlib import Path
from types import ModuleType

from tests.exporter.conftest import ROOT


def mixed_bundle() -> ModuleType:
    """scripts/mixed_bundle.py as a module (it is a script, not part of a package)."""
    name = "xpuwatch_mixed_bundle_script"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "mixed_bundle.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _write(bin_dir: Path, tool: str, body: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / tool
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def _abs(cmd: str) -> str:
    found = shutil.which(cmd)
    assert found, f"{cmd} is needed by the fake tools"
    return found


def printing(bin_dir: Path, tool: str, fixture: Path) -> Path:
    """``tool`` prints ``fixture`` for any arguments and exits 0."""
    return _write(bin_dir, tool, f"exec {_abs('cat')} {shlex.quote(str(fixture))}")


def hanging(bin_dir: Path, tool: str, marker: str = "0") -> Path:
    """``tool`` never answers (a driver call stuck in the kernel). ``marker`` (a number, added to the sleep)
    makes its processes findable in /proc: ``sleep 60 <marker>`` (60 s: a leftover after the test ends soon)."""
    return _write(bin_dir, tool, f"exec {_abs('sleep')} 60 {marker}")


def stalling(bin_dir: Path, tool: str, answers: dict[tuple[str, ...], Path], marker: str) -> Path:
    """``tool`` prints ``answers[args]`` for exactly those arguments and hangs on any other call, like
    ``hanging`` (``sleep 60 <marker>``): a driver whose listing works but whose per-card query is stuck,
    so that a backend runs the tool several times per poll and one call hangs."""
    cases = "".join(
        f"  {shlex.quote(' '.join(args))}) exec {_abs('cat')} {shlex.quote(str(path))} ;;\n"
        for args, path in answers.items()
    )
    return _write(bin_dir, tool, f'case "$*" in\n{cases}  *) exec {_abs("sleep")} 60 {marker} ;;\nesac')


def alive(marker: str) -> int:
    """How many live (non-zombie) processes run ``sleep 60 <marker>``."""
    n = 0
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if proc.joinpath("cmdline").read_bytes().split(b"\0")[1:3] == [b"60", marker.encode()]:
                n += 1
        except (OSError, IndexError):
            continue
    return n


def failing(bin_dir: Path, tool: str, message: str = "Invalid card id.") -> Path:
    """``tool`` prints a usage/error text and exits 1."""
    return _write(bin_dir, tool, f"echo {shlex.quote(message)} >&2\nexit 1")


def garbage(bin_dir: Path, tool: str) -> Path:
    """``tool`` exits 0 having printed something that is no table of any vendor."""
    return _write(bin_dir, tool, "printf '\\001\\377 segfault in libfoo.so\\n+--+\\n|x|\\n'")


def answering(bin_dir: Path, tool: str, answers: dict[tuple[str, ...], Path]) -> Path:
    """``tool`` prints ``answers[args]`` for exactly those arguments; any other call is refused the way an
    argparse-based tool refuses an unknown flag (usage on stderr, exit 2)."""
    cases = "".join(
        f"  {shlex.quote(' '.join(args))}) exec {_abs('cat')} {shlex.quote(str(path))} ;;\n"
        for args, path in answers.items()
    )
    usage = f"usage: {tool} [options]\n{tool}: error: unrecognized arguments: $*"
    return _write(bin_dir, tool, f'case "$*" in\n{cases}  *) echo "{usage}" >&2; exit 2 ;;\nesac')


def every_vendor(bin_dir: Path) -> dict[str, Path]:
    """One fake tool per CLI backend of the mixed node, answering exactly the calls the mixed-node bundle
    records with the same fixtures: backend -> tool."""
    mb = mixed_bundle()
    answers: dict[str, dict[tuple[str, ...], Path]] = {}
    backend_of: dict[str, str] = {}
    texts = bin_dir.parent / "answers"
    texts.mkdir(parents=True, exist_ok=True)
    for i, c in enumerate(mb.CALLS):
        text = texts / f"{i:02d}-{c.argv[0]}.txt"
        text.write_text(c.stdout(), encoding="utf-8")  # the bundle's stdout, documented edits included
        answers.setdefault(c.argv[0], {})[tuple(c.argv[1:])] = text
        backend_of[c.argv[0]] = c.backend
    return {backend_of[tool]: answering(bin_dir, tool, a) for tool, a in answers.items()}
