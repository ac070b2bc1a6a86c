"""Reading the JSON files ccweave takes (schedules, plans, topologies) with one kind of
error: the file, what is wrong, and how to make a good one."""

from __future__ import annotations

import json
from pathlib import Path

from ccweave.errors import InputError


def read_json(path: str | Path, fix: str, error: type[InputError] = InputError) -> object:
    """The parsed content of ``path``; ``error`` names the file and says ``fix`` when it is
    missing, a directory, or not JSON."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise error(f"{path}: no such file ({fix})") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory, not a file ({fix})") from None
    except UnicodeDecodeError:
        raise error(f"{path}: not a text file ({fix})") from None
    except OSError as problem:
        raise error(f"{path}: cannot read it: {problem.strerror or problem} ({fix})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as problem:
        raise error(f"{path}: not valid JSON: {problem.msg} at line {problem.lineno} "
                    f"column {problem.colno} ({fix})") from None
    except RecursionError:
        raise error(f"{path}: arrays or objects nested too deep to read ({fix})") from None
    except ValueError:  # Python reads integers of at most 4300 digits
        raise error(f"{path}: holds a number too long to read (over 4300 digits) "
                    f"({fix})") from None
