"""docs/tour.md stays true: its fast commands run in CI, in the page's order, in one
folder, and each exits as the page says and still prints the lines the page shows; the
pictures it links are committed and small; the README's first screen points to it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOUR = ROOT / "docs" / "tour.md"
README = ROOT / "README.md"
MAX_PICTURE_BYTES = 200_000
BLOCK = re.compile(r"(?:<!-- tour: (?P<marks>.*?) -->\n)?```console\n(?P<body>.*?)```", re.S)
NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?|(?<=time\()(?:us|ms|s)(?=\))")
RULE = re.compile(r"([─━═]){2,}")


@dataclass(frozen=True)
class Command:
    """One `$ ` line of a console block and the output the page shows under it."""

    line: str
    shown: tuple[str, ...]
    skip: str | None = None
    """Why CI does not run it (root, minutes); None: CI runs it."""
    exit_code: int = 0
    measured: bool = False
    """Its figures differ run to run: lines are compared with every number masked."""


def marks(text: str | None) -> dict[str, str]:
    """``skip=root: builds namespaces; measured; exit=2`` -> {"skip": ..., ...}."""
    found = {}
    for part in filter(None, (p.strip() for p in (text or "").split(";"))):
        key, _, value = part.partition("=")
        found[key.strip()] = value.strip()
    return found


def commands(text: str) -> list[Command]:
    """Every command of the page's ```console blocks, with the block's marks."""
    found = []
    for block in BLOCK.finditer(text):
        mark = marks(block["marks"])
        unknown = set(mark) - {"skip", "exit", "measured"}
        assert not unknown, f"tour.md: unknown mark(s) {sorted(unknown)} before a block"
        assert "skip" not in mark or mark["skip"], "tour.md: a skip needs its reason"
        line, shown = None, []
        for row in [*block["body"].splitlines(), "$ "]:
            if row.startswith("$ "):
                if line:
                    found.append(Command(line, tuple(shown), mark.get("skip"),
                                         int(mark.get("exit", 0)), "measured" in mark))
                line, shown = row[2:].strip(), []
            elif row.strip() and row.strip() != "...":
                shown.append(row)
    return found


def normal(line: str, measured: bool) -> str:
    """A line as compared: spaces collapsed, table rules of any length alike, and for
    measured output every number (and the unit of a time column) masked."""
    line = RULE.sub(r"\1", " ".join(line.split()))
    return NUMBER.sub("#", line) if measured else line


def missing(command: Command, output: str) -> list[str]:
    """The shown lines the output lacks, in order (each after the one before it)."""
    printed = [normal(row, command.measured) for row in output.splitlines()]
    at, lacking = 0, []
    for row in command.shown:
        want = normal(row, command.measured)
        try:
            at = printed.index(want, at) + 1
        except ValueError:
            lacking.append(row)
    return lacking


def argv(line: str) -> list[str]:
    words = shlex.split(line)
    assert words[0] in ("ccweave", "python"), f"tour.md: {line!r} runs neither ccweave nor python"
    program = Path(sys.executable).with_name("ccweave") if words[0] == "ccweave" \
        else Path(sys.executable)
    return [str(program), *words[1:]]


def plotted(words: list[str]) -> list[str]:
    """The files a command's ``--plot`` names (a path, or bench's PREFIX)."""
    return [words[i + 1] for i, word in enumerate(words[:-1]) if word == "--plot"]


def test_the_page_parses_into_run_and_skipped_commands():
    found = commands(TOUR.read_text())
    run = [c for c in found if c.skip is None]
    assert len(run) >= 8 and any(c.skip for c in found)
    assert all(c.shown for c in found), "every command's output is shown"


def test_a_changed_line_is_found_missing():
    command = Command("ccweave x", ("rank 0 ok", "wrote 3.5 MB"), measured=True)
    assert missing(command, "rank 0 ok\nwrote 12 MB\n") == []
    assert missing(command, "rank 0 fine\nwrote 12 MB\n") == ["rank 0 ok"]
    header = Command("ccweave x", ("┃ size ┃ time(us) ┃",), measured=True)
    assert missing(header, "┃ size ┃ time(ms) ┃") == []
    assert missing(header, "┃ size ┃ algbw(ms) ┃") == ["┃ size ┃ time(us) ┃"]
    exact = Command("ccweave x", ("┃ a ━━━ b ┃", "time 3.5"))
    assert missing(exact, "┃  a ━━━━━━ b  ┃\ntime 3.6") == ["time 3.5"]
    assert missing(exact, "time 3.5\n┃ a ━ b ┃") == ["time 3.5"]  # order kept


def test_tour_commands_run_and_print_what_the_page_shows(tmp_path):
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "docs" / "tour").mkdir(parents=True)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
               OMP_NUM_THREADS="1")
    failures = []
    for command in commands(TOUR.read_text()):
        if command.skip:
            continue
        words = argv(command.line)
        done = subprocess.run(words, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)
        output = done.stdout + done.stderr
        if done.returncode != command.exit_code:
            failures.append(f"$ {command.line}: exit {done.returncode}, the page says "
                            f"{command.exit_code}\n{output[-2000:]}")
            continue
        lacking = missing(command, output)
        if lacking:
            failures.append(f"$ {command.line}: no longer prints\n  " + "\n  ".join(lacking))
        for path in plotted(words):
            if not list(tmp_path.glob(f"{path}*")):
                failures.append(f"$ {command.line}: wrote no {path}")
    assert not failures, "\n\n".join(failures)


def test_skipped_commands_say_why_and_are_ccweave_or_python():
    for command in commands(TOUR.read_text()):
        argv(command.line)
        if command.skip:
            assert len(command.skip) > 10, f"{command.line}: skip reason {command.skip!r}"


def test_pictures_linked_from_the_tour_are_committed_small_pngs():
    linked = re.findall(r"\]\((tour/[^)]+\.png)\)", TOUR.read_text())
    assert len(linked) >= 3, "topology, busbw vs size, predicted vs measured"
    for name in linked:
        picture = TOUR.parent / name
        assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert picture.stat().st_size < MAX_PICTURE_BYTES, f"{name}: over 200 KB"


def test_readme_opens_with_the_two_commands_and_points_to_the_tour():
    lines = README.read_text().splitlines()
    first = lines[lines.index("```bash") + 1:lines.index("```", lines.index("```bash"))]
    assert [row.split("#")[0].strip() for row in first] == ["scripts/demo.sh",
                                                            "scripts/test.sh"]
    assert "exec scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
    screen = "\n".join(lines[:40])
    assert "docs/tour.md" in screen and "docs/architecture.md" in screen
    assert len(lines) <= 120
    for link in re.findall(r"\]\(((?:docs|examples)/[^)#]+)", README.read_text()):
        assert (ROOT / link).exists(), f"README links {link}, which is missing"


@pytest.mark.parametrize("link", sorted(set(re.findall(
    r"\]\(([a-z][\w.-]*\.md)(?:#[^)]*)?\)", TOUR.read_text() if TOUR.exists() else ""))))
def test_tour_links_to_pages_that_exist(link):
    assert (TOUR.parent / link).exists()
