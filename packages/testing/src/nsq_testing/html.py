"""Reading nsqadmin's HTML pages in tests: their tables as rows of cell texts."""

from __future__ import annotations

from html.parser import HTMLParser


class Rows(HTMLParser):
    """Table rows of an HTML page as lists of cell texts (whitespace collapsed)."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self.rows:
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def row(self, first: str) -> list[str]:
        """The first row whose first cell starts with ``first``."""
        return next(r for r in self.rows if r and r[0].startswith(first))
