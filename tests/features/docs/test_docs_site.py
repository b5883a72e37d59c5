"""The documentation site builds strictly (no broken link, anchor or docstring), and the
option tables of docs/configuration.md and docs/message-options.md name every public
option with the default the code has."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_type_hints

import pytest

from faststream_sqla import SqlaBroker, SqlaRouter
from faststream_sqla.options import DeliveryOptionArgs
from faststream_sqla.publisher.usecase import SqlaPublisher
from faststream_sqla.subscriber.config import ConsumeOptions

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs"

#: a table row of an option: | `name` | default | meaning |
_ROW = re.compile(r"^\| `(?P<name>[a-z_]+)` \| (?P<default>[^|]*) \|", re.MULTILINE)


def test_mkdocs_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "WARNING" not in result.stderr, result.stderr[-4000:]
    assert (site / "architecture" / "index.html").is_file()
    # the API reference is generated from the docstrings, not empty headings
    broker = (site / "reference" / "broker" / "index.html").read_text()
    assert "release_stuck_timeout" in broker
    assert "The queue tables" in broker


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    # mkdocs.yml's validation must turn a link to a missing page or anchor into an error
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\n[gone](missing.md) and [anchor](#nowhere)\n")
    config = (ROOT / "mkdocs.yml").read_text()
    config = re.sub(r"(?ms)^nav:.*?(?=^\S)", "", config)
    config = config.replace("docs_dir: docs", f"docs_dir: {docs}")
    (tmp_path / "mkdocs.yml").write_text(config)
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert result.returncode != 0
    assert "missing.md" in result.stderr
    assert "nowhere" in result.stderr


#: a page of the docs cited from code, with its heading if any
_CITATION = re.compile(r"docs/(?P<page>[a-z0-9-]+\.md)(?:#(?P<anchor>[a-z0-9-]+))?")
_HEADING = re.compile(r"^#{1,6}\s+(?P<text>.+?)\s*$")


def _anchors(page: Path) -> set[str]:
    """The anchors mkdocs gives the page's headings (the toc extension's slugify)."""
    from markdown.extensions.toc import slugify

    anchors, fenced = set(), False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and (m := _HEADING.match(line)):
            anchors.add(slugify(m["text"], "-"))
    return anchors


def test_code_cites_pages_and_headings_that_exist() -> None:
    # Comments and docstrings cite the docs as docs/<page>.md#<heading>; a renamed
    # heading must take its citations along. Code cites the benchmark reference, whose
    # headings are kept stable, never the history of rounds behind it.
    cited = [
        (path.relative_to(ROOT), m["page"], m["anchor"])
        for folder in ("faststream_sqla", "benchmarks", "tests", "examples", "chaos")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for m in _CITATION.finditer(path.read_text())
    ]
    assert any(anchor for _, _, anchor in cited)
    for path, page, anchor in cited:
        assert page != "benchmarks-history.md", f"{path} cites the history of rounds"
        assert (DOCS / page).is_file(), f"{path} cites docs/{page}, which does not exist"
        if anchor is not None:
            assert anchor in _anchors(DOCS / page), f"{path}: docs/{page} has no #{anchor}"


#: a test file or folder named in prose, a comment or a list of CI's
_TEST_PATH = re.compile(r"\btests/[\w/]*\w(?:\.py)?")


def test_the_test_paths_that_pages_ci_and_tests_name_exist() -> None:
    # A moved or renamed test file must take along the pages, CI's lists, the package's
    # comments and the docstrings that name it.
    sources = [
        ROOT / "README.md", ROOT / "mkdocs.yml", ROOT / "pyproject.toml", ROOT / ".ci" / "run",
        *sorted(DOCS.rglob("*.md")),
        *(path for folder in ("faststream_sqla", "tests", "chaos", "benchmarks", "examples")
          for path in sorted((ROOT / folder).rglob("*.py"))),
    ]  # fmt: skip
    named = [
        (source.relative_to(ROOT), m[0])
        for source in sources
        for m in _TEST_PATH.finditer(source.read_text())
    ]
    assert named
    missing = [(str(source), path) for source, path in named if not (ROOT / path).exists()]
    assert not missing, missing


def _rows(page: str, section: str | None = None) -> dict[str, list[str]]:
    text = (DOCS / page).read_text()
    if section is not None:
        start = text.index(section)
        end = text.find("\n## ", start + len(section))
        text = text[start : end if end != -1 else None]
    rows: dict[str, list[str]] = {}
    for m in _ROW.finditer(text):
        rows.setdefault(m["name"], []).append(m["default"].strip())
    return rows


def _documented_default(cell: str) -> tuple[bool, Any]:
    """The literal a Default cell starts with (`None`, `15.0`, `"message"`), if any."""
    m = re.match(r"`([^`]*)`", cell)
    if m is None:
        return False, None
    try:
        return True, ast.literal_eval(m[1])
    except (ValueError, SyntaxError):
        return False, None  # an expression such as `logging.INFO` or a class call


API: list[tuple[str, str | None, Callable[..., Any]]] = [
    ("configuration.md", "## `SqlaBroker`", SqlaBroker.__init__),
    ("configuration.md", "## `broker.subscriber()`", SqlaBroker.subscriber),
    ("configuration.md", "## `broker.publisher()`", SqlaBroker.publisher),
    ("configuration.md", "## Publishing", SqlaBroker.publish),
    ("configuration.md", "## Publishing", SqlaBroker.publish_batch),
    ("configuration.md", "## Publishing", SqlaPublisher.publish),
    ("configuration.md", "## Publishing", SqlaPublisher.publish_batch),
]


@pytest.mark.parametrize(
    ("page", "section", "function"), API, ids=[f.__qualname__ for _, _, f in API]
)
def test_every_option_has_a_row_with_the_codes_default(
    page: str, section: str | None, function: Callable[..., Any]
) -> None:
    rows = _rows(page, section)
    text = (DOCS / page).read_text()
    for name, parameter in inspect.signature(function).parameters.items():
        if name == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue  # *messages, and **options (the delivery options: next test)
        assert name in rows, f"{page} {section}: no row for `{name}` of {function.__qualname__}"
        if parameter.default is parameter.empty:
            # publish_batch's queue shares publish()'s row and says so in the text
            assert "required" in rows[name] or f"`{name}` is required" in text, (
                f"{page}: `{name}` of {function.__qualname__} is required; the docs "
                f"give {rows[name]}"
            )
            continue
        literals = [value for ok, value in map(_documented_default, rows[name]) if ok]
        if literals:
            assert parameter.default in literals, (
                f"{page}: `{name}` is documented with default {literals}, "
                f"the code has {parameter.default!r}"
            )


def test_every_delivery_option_is_documented() -> None:
    summary = _rows("message-options.md")
    publishing = _rows("configuration.md", "## Publishing")
    for name in get_type_hints(DeliveryOptionArgs):
        assert name in summary, f"message-options.md: no row for `{name}`"
        assert name in publishing, f"configuration.md, Publishing: no row for `{name}`"


def test_the_router_section_names_every_parameter() -> None:
    text = (DOCS / "configuration.md").read_text()
    section = text[text.index("## `SqlaRouter`") :]
    section = section[: section.find("\n## ", 3)]
    for function in (SqlaRouter.__init__, SqlaBroker.include_router):
        for name in inspect.signature(function).parameters:
            if name != "self":
                assert f"{name}" in section, f"configuration.md, SqlaRouter: `{name}` missing"


def test_the_subscriber_signature_shows_the_consume_options_defaults() -> None:
    # the defaults are spelled out in the signature so the API reference shows them
    defaults = ConsumeOptions()
    parameters = inspect.signature(SqlaBroker.subscriber).parameters
    for field in dataclasses.fields(ConsumeOptions):
        if field.name in parameters and field.name != "retry_strategy":
            expected = getattr(defaults, field.name)
            actual = parameters[field.name].default
            if field.name == "permanent_exceptions":
                actual = tuple(actual)
            assert actual == expected, (field.name, actual, expected)


def test_the_benchmarks_reference_stays_a_reference() -> None:
    # docs/benchmarks.md holds the latest figures and how to reproduce them; rounds of
    # measurement belong in benchmarks-history.md, outside the site's navigation
    lines = (DOCS / "benchmarks.md").read_text().splitlines()
    assert len(lines) <= 400, f"docs/benchmarks.md has {len(lines)} lines; move history out"
