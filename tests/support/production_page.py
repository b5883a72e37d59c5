"""The code and configuration blocks of docs/production.md, for the tests that run them
as the page shows them."""

from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "production.md"
_BLOCK = re.compile(r"^```(?P<lang>\w+)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)


def blocks(lang: str) -> list[str]:
    """The page's fenced blocks in `lang`, in page order."""
    text = PAGE.read_text(encoding="utf-8")
    return [m["body"] for m in _BLOCK.finditer(text) if m["lang"] == lang]


def block(lang: str, first_line: str) -> str:
    """The one block in `lang` whose first line is `first_line`."""
    (found,) = [b for b in blocks(lang) if b.split("\n", 1)[0].strip() == first_line]
    return found


def service_source() -> str:
    """`service.py` as the page shows it."""
    return block("python", "# service.py")


def write_service(directory: Path) -> Path:
    path = directory / "service.py"
    path.write_text(service_source(), encoding="utf-8")
    return path
