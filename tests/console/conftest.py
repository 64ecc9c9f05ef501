"""Where the console suite's screenshots go: LATCHKEY_CONSOLE_SCREENSHOTS, or a new temporary folder, named at the end
of the run."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

_folder: list[Path] = []


@pytest.fixture(scope="session")
def screenshots() -> Path:
    if not _folder:
        chosen = os.environ.get("LATCHKEY_CONSOLE_SCREENSHOTS")
        folder = Path(chosen) if chosen else Path(tempfile.mkdtemp(prefix="latchkey-console-screenshots-"))
        folder.mkdir(parents=True, exist_ok=True)
        _folder.append(folder)
    return _folder[0]


def pytest_terminal_summary(terminalreporter) -> None:
    if _folder:
        shots = sorted(path.name for path in _folder[0].glob("*.png"))
        terminalreporter.write_line(f"console screenshots ({len(shots)}): {_folder[0]}")
