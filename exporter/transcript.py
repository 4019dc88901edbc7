"""`xpuwatch inspect` input: a pasted terminal transcript -> one block per command (pure text splitting).

What users paste into issues is rarely one clean tool output: the command line stays on top
(``$ npu-smi info -t board -i 0``, ``[root@node1 ~]# hy-smi``, ``/usr/local/bin/npu-smi info -m``), and two or
three commands follow one another (``npu-smi info -t board`` then ``-t health``). ``blocks`` finds the command
lines and cuts the text there, so that each block is read with its own format and the prompt and command lines
never reach a parser.

A line is a command line when it is, at column 0:

- a shell prompt that names a user and host (``user@host:~$ ...``, ``[root@host dir]# ...``,
  ``(venv) user@host:~$ ...``), followed by any command; a prompt line with no command ends the block;
- a bare prompt (``$``, ``#``, ``>``, ``PS C:\\>``) followed by a known vendor tool (``$ mx-smi``,
  ``# sudo npu-smi info``): a bare ``#`` before anything else is a comment (Prometheus ``# HELP``), not a prompt;
- a known vendor tool, by name or path, with no prompt (``/usr/local/bin/npu-smi info -m``, ``./hy-smi
  --showmemavailable``, ``sudo amd-smi``, ``watch -n 1 hy-smi``), its words one space apart and none a
  ``key:`` (so that a tool's banner, ``mx-smi  version: 2.2.12``, stays output).

Text without any command line is one block with no command: every format that read a file before still reads it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TOOLS = frozenset(
    {
        "nvidia-smi",
        "dcgmi",
        "amd-smi",
        "rocm-smi",
        "hy-smi",
        "npu-smi",
        "cnmon",
        "xpu-smi",
        "xpu_smi",
        "mx-smi",
        "mthreads-gmi",
        "ixsmi",
        "efsmi",
        "hl-smi",
        "xpuwatch",
    }
)
"""Programs whose name alone marks a command line (the tools ``xpuwatch inspect`` has formats for)."""

# user@host prompts: "user@host:~/dir$ ", "[root@host dir]# ", "(venv) user@host ~ % ".
_HOST_PROMPT = re.compile(
    r"^(?:\([^()\s]{1,64}\)\s+)?(?:\[[^\]\s@]{1,64}@[^\]]{1,128}\]|[\w.-]{1,64}@[\w.-]{1,128}(?::[^\s$#%>]*)?[^\s$#%>]{0,64})"
    r"\s?[$#%>](?:\s+(?P<cmd>\S.*?))?\s*$"
)
_BARE_PROMPT = re.compile(r"^(?:PS [^>]{1,128}>|[$#>%])\s+(?P<cmd>\S.*?)\s*$")
# Words a command may start with before the tool itself.
_WRAPPERS = {"sudo", "time", "env", "command", "exec", "nohup"}
_MAX_LINE = 2000
_KEY_WORD = re.compile(r"\S:(?:\s|$)")


@dataclass(frozen=True)
class Block:
    """One command's output: ``command`` as printed (None for text before any command line), ``text`` its
    output lines (command line excluded), ``line`` the 1-based line number where the output starts."""

    command: str | None
    text: str
    line: int


def _tool_command(cmd: str) -> bool:
    """True when ``cmd`` runs a known tool: its first word (after sudo/env/watch options and VAR=value
    assignments) has a basename in ``TOOLS``."""
    words = cmd.split()
    i = 0
    while i < len(words):
        w = words[i]
        if w in _WRAPPERS or ("=" in w.split("/")[0] and not w.startswith(("/", "."))):
            i += 1
        elif w == "watch":
            i += 1
            while i < len(words) and words[i].startswith("-"):
                i += 2 if words[i] in ("-n", "--interval") else 1
        else:
            return w.rsplit("/", 1)[-1] in TOOLS
    return False


def command_of(line: str) -> str | None:
    """The command a transcript line runs, or None when it is no command line. An empty string for a bare
    ``user@host`` prompt with nothing after it (ends a block). Never raises."""
    if not line or line[0].isspace() or len(line) > _MAX_LINE:
        return None
    m = _HOST_PROMPT.match(line)
    if m:
        return m.group("cmd") or ""
    m = _BARE_PROMPT.match(line)
    if m:
        return m.group("cmd") if _tool_command(m.group("cmd")) else None
    stripped = line.strip()
    # Without a prompt a tool's own banner could pass for a command ("mx-smi  version: 2.2.12"): a command
    # line has single spaces between its words and no "key:" word.
    if "  " in stripped or _KEY_WORD.search(stripped):
        return None
    return stripped if _tool_command(stripped) else None


def blocks(text: str) -> list[Block]:
    """Split a transcript into its commands' outputs (module docstring). Blocks holding only blank lines are
    dropped; text with no command line is returned whole as one block (``command`` None). Never raises."""
    lines = text.splitlines(keepends=True)
    out: list[Block] = []
    command: str | None = None
    start = 0
    body: list[str] = []
    found = False

    def close() -> None:
        if command is not None or any(b.strip() for b in body):
            out.append(Block(command, "".join(body), start + 1))

    for i, line in enumerate(lines):
        cmd = command_of(line.rstrip("\r\n"))
        if cmd is None:
            body.append(line)
            continue
        close()
        found = True
        # an empty prompt (cmd ""): what follows belongs to no command until the next one
        command, start, body = (cmd or None), i + 1, []
    close()
    return out if found else [Block(None, text, 1)]
