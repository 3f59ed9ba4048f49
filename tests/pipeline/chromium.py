"""Headless Chromium as the report's reader: what a page looks like at a given window width.

The page is copied with a script appended that opens every <details> and measures every table
cell; `chromium --dump-dom` then hands back the DOM, measurements included, once the page (and
the virtual time budget) settled."""

from __future__ import annotations

import html
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

_MEASURE = """
<script>
document.querySelectorAll("details").forEach(function (d) { d.open = true; });
var width = document.documentElement.clientWidth;
var off = [];
var headers = [];
document.querySelectorAll("table").forEach(function (table) {
  table.querySelectorAll("th,td").forEach(function (cell) {
    var box = cell.getBoundingClientRect();
    if (cell.tagName === "TH") { headers.push(cell.textContent); }
    if (box.right > width + 0.5 || box.left < 0 || box.width < 1) {
      off.push(cell.tagName + " " + cell.textContent.slice(0, 40) + " right=" + box.right);
    }
  });
});
document.body.setAttribute("data-layout", JSON.stringify({
  width: width, scrollWidth: document.documentElement.scrollWidth, headers: headers, off: off}));
</script>
"""


@dataclass(frozen=True, slots=True)
class Layout:
    """The window's width, the page's, every table heading, and each cell not fully visible."""

    width: int
    scroll_width: int
    headers: list[str]
    off: list[str]


def chromium() -> str:
    found = shutil.which("chromium")
    assert found, "chromium is missing: `make system-deps` installs it"
    return found


def _run(*args: str) -> str:
    # --no-sandbox: the tests may run as root, where Chromium refuses its sandbox.
    completed = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         "--virtual-time-budget=5000", *args],
        capture_output=True, text=True, timeout=120, check=True,
    )
    return completed.stdout


def layout(page: Path, width: int, height: int = 1000) -> Layout:
    """How `page` lays out in a `width` x `height` window, every <details> opened."""
    measured = page.with_name(page.stem + ".measured.html")
    measured.write_text(page.read_text().replace("</body>", _MEASURE + "</body>"))
    dom = _run(f"--window-size={width},{height}", "--dump-dom", measured.as_uri())
    marker = 'data-layout="'
    start = dom.index(marker) + len(marker)
    raw = dom[start:dom.index('"', start)]
    found = json.loads(html.unescape(raw))
    return Layout(found["width"], found["scrollWidth"], found["headers"], found["off"])


def screenshot(page: Path, png: Path, width: int, height: int = 1000) -> bytes:
    """A PNG of the top of `page` in a `width` x `height` window."""
    _run(f"--window-size={width},{height}", f"--screenshot={png}", page.as_uri())
    return png.read_bytes()
