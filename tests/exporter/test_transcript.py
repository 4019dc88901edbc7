"""Transcripts pasted into issues: prompt and command lines skipped, several commands read block by block."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FIXTURES
from xpuwatch.exporter.cli import inspect_files
from xpuwatch.exporter.transcript import Block, blocks, command_of

ROOT = Path(__file__).resolve().parents[2]
HY_SMI = (FIXTURES / "hygon" / "hy-smi_showmemavailable_K100_AIx8_65438MiB_key-value.txt").read_text()
MTHREADS = (
    FIXTURES
    / "mthreads"
    / "mthreads-gmi_S4000_1.12.2_drv1.2.0_used-exceeds-total-44302of32768_88pct_excerpt.txt"
).read_text()


def test_command_lines_are_told_from_output_lines() -> None:
    assert command_of("$ nvidia-smi -q -x") == "nvidia-smi -q -x"
    assert command_of("[root@node-1 ~]# ./hy-smi --showmemavailable") == "./hy-smi --showmemavailable"
    assert command_of("user@gpu01:~/work$ cat out.txt") == "cat out.txt"  # a user@host prompt: any command
    assert command_of("(venv) user@gpu01:~$ sudo mx-smi") == "sudo mx-smi"
    assert command_of("user@gpu01:~$") == ""  # an empty prompt ends a block
    assert (
        command_of("/usr/local/bin/npu-smi info -i 0 -t board") == "/usr/local/bin/npu-smi info -i 0 -t board"
    )
    assert command_of("sudo watch -n 1 hy-smi") == "sudo watch -n 1 hy-smi"
    assert command_of("PS C:\\> nvidia-smi") == "nvidia-smi"
    assert command_of("# sudo npu-smi info -m") == "sudo npu-smi info -m"
    for output in (
        "# HELP accelerator_up 1 if the device answers",  # a Prometheus comment, not a root prompt
        "# SOURCE: github.com/utkuozdemir/nvidia_gpu_exporter",
        "    mthreads-gmi:1.12.2          Driver Version:1.2.0",  # the tool's own title, indented
        "| npu-smi 23.0.3                   Version: 23.0.3                                   |",
        "$ 5 dollars",
        "mx-smi  version: 2.2.12",  # the tool's banner (hawkli-1994/gpu_tools pkg/gpu/mx/testdata)
        "mx-smi version: 2.2.12",
        "HCU[0]          : Available memory size (MiB): 65438",
    ):
        assert command_of(output) is None, output


def test_two_commands_with_prompts_split_into_blocks() -> None:
    text = f"[root@node-1 ~]# ./hy-smi --showmemavailable\n{HY_SMI}[root@node-1 ~]# mthreads-gmi\n{MTHREADS}[root@node-1 ~]#\n"
    got = blocks(text)
    assert [(b.command, b.line) for b in got] == [
        ("./hy-smi --showmemavailable", 2),
        ("mthreads-gmi", 2 + len(HY_SMI.splitlines()) + 1),
    ]
    assert got[0].text == HY_SMI and got[1].text == MTHREADS


def test_text_without_commands_is_one_block() -> None:
    assert blocks(MTHREADS) == [Block(None, MTHREADS, 1)]
    assert blocks("") == [Block(None, "", 1)]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["$ hy-smi", "# HELP x y", "user@h:~$", "/opt/bin/npu-smi info", "", "  v: 1", "HCU[0] : a: 1"]
        )
        | st.text(max_size=30),
        max_size=20,
    )
)
def test_blocks_keep_every_output_line_in_order(lines: list[str]) -> None:
    text = "\n".join(lines)
    got = blocks(text)
    kept = [line for line in text.splitlines() if command_of(line) is None]
    assert [line for b in got for line in b.text.splitlines() if line.strip()] == [
        k for k in kept if k.strip()
    ]


def test_inspect_reads_each_block_with_its_own_format(tmp_path: Path) -> None:
    paste = tmp_path / "issue.txt"
    paste.write_text(f"$ sudo hy-smi --showmemavailable\n{HY_SMI}$ mthreads-gmi\n{MTHREADS}")
    explained: list[str] = []
    body, errors = inspect_files([str(paste)], None, "n1", explained)
    assert errors == []
    text = body.decode()
    assert text.count('accelerator_up{device="') == 9  # 8 HCUs and the S4000
    assert 'accelerator_hygon_memory_available_bytes{device="7"' in text
    assert 'xpuwatch_implausible_readings{device="0",model="MTT S4000"' in text
    heads = [line for line in explained if line.startswith("# explain")]
    assert heads == [
        f"# explain {paste} block 1 (`sudo hy-smi --showmemavailable`, line 2): format hy-smi-text, 8 device(s)",
        f"# explain {paste} block 2 (`mthreads-gmi`, line {3 + len(HY_SMI.splitlines())}): format mthreads-gmi-table, 1 device(s)",
    ]


def test_inspect_names_the_block_it_cannot_read_and_reads_the_others(tmp_path: Path) -> None:
    paste = tmp_path / "issue.txt"
    paste.write_text(f"$ mx-smi\nmx-smi: command not found\n$ mthreads-gmi\n{MTHREADS}")
    res = subprocess.run(
        [sys.executable, "-m", "xpuwatch", "inspect", str(paste)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 1
    # a command whose few lines no format claims is the tool's own error, not a format to name
    assert res.stderr.splitlines() == [
        f"xpuwatch inspect: {paste} block 1 (`mx-smi`, line 2): the command printed no device output "
        "('mx-smi: command not found'): nothing to read"
    ]
    assert 'accelerator_up{device="0",model="MTT S4000"' in res.stdout


def test_a_long_unreadable_block_still_names_the_formats_tried(tmp_path: Path) -> None:
    paste = tmp_path / "issue.txt"
    paste.write_text("$ mx-smi\n" + "".join(f"unknown line {i}\n" for i in range(10)))
    res = subprocess.run(
        [sys.executable, "-m", "xpuwatch", "inspect", str(paste)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    (line,) = res.stderr.splitlines()
    assert "no known format matches (tried " in line and line.endswith("; pass --format NAME")


def test_blocks_of_one_device_are_overlaid(tmp_path: Path) -> None:
    """`--showuse` then `--showmeminfo vram` pasted as two commands: one device each, readings combined."""
    paste = tmp_path / "issue.txt"
    paste.write_text(
        "user@dcu:~$ hy-smi --showuse\nHCU[0]\t\t: HCU use (%): 15.0\n"
        "user@dcu:~$ hy-smi --showmeminfo vram\nHCU[0]\t\t: vram Total Memory (MiB): 65520\n"
        "HCU[0]\t\t: vram Total Used Memory (MiB): 12058\nuser@dcu:~$\n"
    )
    body, errors = inspect_files([str(paste)], None, "n1")
    assert errors == []
    text = body.decode()
    assert text.count("accelerator_up{") == 1
    assert (
        'accelerator_utilization_ratio{device="0",model="unknown",node="n1",uuid="hygon-index-0",vendor="hygon"} 0.15'
        in text
    )
    assert (
        'accelerator_memory_used_bytes{device="0",model="unknown",node="n1",uuid="hygon-index-0",vendor="hygon"} 1.2643729408e+10'
        in text
    )


HEALTH_ALARM = FIXTURES / "ascend" / "npu-smi_info_-t_health_Alarm_with_error_codes.txt"


def test_a_pasted_health_block_takes_its_chip_from_the_command_line() -> None:
    """`npu-smi info -t health` prints no chip id: a pasted health block came out as device="" uuid="" and
    never met the same chip's other readings. The command line above it (`-i 0 -c 0`) names the chip."""
    body, errors = inspect_files([str(HEALTH_ALARM)], None, "n1")
    text = body.decode()
    assert 'accelerator_huawei_health_state{device="0-0"' in text
    assert 'uuid="ascend-npu0-chip0"' in text and 'uuid=""' not in text
    assert len(errors) == 1 and "Invalid card id." in errors[0]  # the capture's failed -t board command


def test_a_health_block_overlays_the_usages_of_the_chip_its_command_names(tmp_path: Path) -> None:
    usages = (FIXTURES / "ascend" / "npu-smi_info_-t_usages_-i_0_910B.txt").read_text()
    health = "\n".join(
        HEALTH_ALARM.read_text().splitlines()[5:]
    )  # the health block alone, command line first
    assert health.startswith("/usr/local/bin/npu-smi info -i 0 -c 0 -t health")
    f = tmp_path / "t.txt"
    f.write_text(f"$ npu-smi info -t usages -i 0\n{usages}\n{health}\n")
    body, errors = inspect_files([str(f)], None, "n1")
    assert errors == []
    ups = [ln for ln in body.decode().splitlines() if ln.startswith("accelerator_up{")]
    assert ups == [
        'accelerator_up{device="0-0",model="Ascend",node="n1",uuid="ascend-npu0-chip0",vendor="huawei"} 1.0'
    ]
    assert (
        'accelerator_huawei_health_state{device="0-0",model="Ascend",node="n1",uuid="ascend-npu0-chip0",vendor="huawei"} 2.0'
        in body.decode()
    )


def test_chip_named_by_reads_i_and_c_in_any_spelling() -> None:
    from xpuwatch.vendors.ascend.samples import chip_named_by

    for cmd, want in (
        ("npu-smi info -t health -i 3 -c 1", "3-1"),
        ("/usr/local/bin/npu-smi info -c 1 -i 3 -t health", "3-1"),
        ("sudo npu-smi info -t health -i3 -c1", "3-1"),
    ):
        dev = chip_named_by(cmd)
        assert dev is not None and dev.index == want and dev.uuid == f"ascend-npu{want[0]}-chip{want[2]}"
    for cmd in (
        "npu-smi info -t health -i 3",
        "npu-smi info -t health -i x -c 0",
        "hy-smi -i 0 -c 0",
        "npu-smi -i",
    ):
        assert chip_named_by(cmd) is None
