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
var broken = [];
document.querySelectorAll("table").forEach(function (table) {
  table.querySelectorAll("th,td").forEach(function (cell) {
    var box = cell.getBoundingClientRect();
    if (cell.tagName === "TH") { headers.push(cell.textContent); }
    if (box.right > width + 0.5 || box.left < 0 || box.width < 1) {
      off.push(cell.tagName + " " + cell.textContent.slice(0, 40) + " right=" + box.right);
    }
    // A word (a state, a status, a protocol) cut across lines reads as two words: a line may
    // only end after "-" or "_", or between the parts of a CamelCase word.
    var text = cell.textContent.trim();
    if (cell.tagName === "TD" && text && text.length <= 24 && !/\\s/.test(text)) {
      var chars = [];
      var walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
      for (var node = walker.nextNode(); node; node = walker.nextNode()) {
        for (var i = 0; i < node.length; i++) {
          var range = document.createRange();
          range.setStart(node, i);
          range.setEnd(node, i + 1);
          var rects = range.getClientRects();
          if (rects.length) { chars.push([node.data[i], Math.round(rects[0].top)]); }
        }
      }
      for (var k = 1; k < chars.length; k++) {
        var before = chars[k - 1][0], after = chars[k][0];
        var allowed = before === "-" || before === "_" ||
          (/[a-z]/.test(before) && /[A-Z]/.test(after));
        if (chars[k][1] > chars[k - 1][1] && !allowed) { broken.push(text); break; }
      }
    }
  });
});
document.body.setAttribute("data-layout", JSON.stringify({
  width: width, scrollWidth: document.documentElement.scrollWidth, headers: headers, off: off,
  broken: broken}));
</script>
"""


@dataclass(frozen=True, slots=True)
class Layout:
    """The window's width, the page's, every table heading, each cell not fully visible, and
    each one-word cell (up to 24 characters) broken across lines elsewhere than after a hyphen
    or underscore or between the parts of a CamelCase word."""

    width: int
    scroll_width: int
    headers: list[str]
    off: list[str]
    broken: list[str]


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
    return Layout(found["width"], found["scrollWidth"], found["headers"], found["off"],
                  found["broken"])


def screenshot(page: Path, png: Path, width: int, height: int = 1000) -> bytes:
    """A PNG of the top of `page` in a `width` x `height` window."""
    _run(f"--window-size={width},{height}", f"--screenshot={png}", page.as_uri())
    return png.read_bytes()
