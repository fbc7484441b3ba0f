"""Fail if built HTML docs would load anything from the network.

Usage: python docs/check_offline.py BUILD_DIR

Looks at every .html, .css and .js file under BUILD_DIR: a script, stylesheet, image,
frame, media or font must come from the build itself, never from an http(s):// or
protocol-relative (//host) address, so the docs work on an offline or locked-down
network. Links a reader clicks (<a href>) are fine.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

REMOTE = re.compile(r"^\s*(https?:)?//", re.IGNORECASE)
# url(...) and @import in CSS, inline or in files: quoted or not.
CSS_REMOTE = re.compile(
    r"""(?:url\(\s*['"]?|@import\s+['"])\s*((?:https?:)?//[^'")\s]+)""", re.IGNORECASE
)
WEB_FONT_HOSTS = re.compile(r"fonts\.(googleapis|gstatic)\.com|use\.typekit\.net", re.IGNORECASE)
# Attributes whose URL the browser fetches by itself, per tag.
LOADED = {
    "script": ("src",),
    "link": ("href",),
    "img": ("src", "srcset"),
    "iframe": ("src",),
    "frame": ("src",),
    "embed": ("src",),
    "object": ("data",),
    "source": ("src", "srcset"),
    "video": ("src", "poster"),
    "audio": ("src",),
    "track": ("src",),
    "input": ("src",),
}


def _srcset_urls(srcset: str) -> list[str]:
    """Return the URLs of a srcset ("a.png 1x, b.png 2x")."""
    return [candidate.split()[0] for candidate in srcset.split(",") if candidate.strip()]


class _Loads(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.remote: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._in_style = tag == "style"
        for name, value in attrs:
            if not value:
                continue
            if name in LOADED.get(tag, ()):
                urls = _srcset_urls(value) if name == "srcset" else [value]
                self.remote.extend(
                    "<%s %s=%s>" % (tag, name, url) for url in urls if REMOTE.match(url)
                )
            if name == "style":
                self.remote.extend(CSS_REMOTE.findall(value))

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.remote.extend(CSS_REMOTE.findall(data))


def remote_loads(path: Path) -> list[str]:
    """Return what ``path`` (an .html, .css or .js file) would fetch from the network."""
    text = path.read_text(encoding="utf-8", errors="replace")
    found: list[str] = []
    if path.suffix == ".html":
        parser = _Loads()
        parser.feed(text)
        found.extend(parser.remote)
    elif path.suffix == ".css":
        found.extend(CSS_REMOTE.findall(text))
    found.extend("web font host %s" % m.group(0) for m in WEB_FONT_HOSTS.finditer(text))
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not Path(argv[1]).is_dir():
        print("usage: python docs/check_offline.py BUILD_DIR", file=sys.stderr)
        return 2
    root = Path(argv[1])
    files = sorted(p for p in root.rglob("*") if p.suffix in (".html", ".css", ".js"))
    problems = [(path, load) for path in files for load in remote_loads(path)]
    for path, load in problems:
        print("%s: loads %s" % (path.relative_to(root), load), file=sys.stderr)
    pages = sum(1 for p in files if p.suffix == ".html")
    if problems:
        print("%d network load(s) in the built docs." % len(problems), file=sys.stderr)
        return 1
    if not pages:
        print("No HTML pages under %s." % root, file=sys.stderr)
        return 1
    print("%d pages, %d files checked: nothing loads from the network." % (pages, len(files)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
