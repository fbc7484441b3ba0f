"""docs/check_offline.py: the CI step that keeps the built docs free of network loads."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "check_offline.py"
spec = importlib.util.spec_from_file_location("check_offline", SCRIPT)
check_offline = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_offline)

LOCAL_PAGE = """<!doctype html><html><head>
<link rel="stylesheet" href="_static/furo.css"><script src="_static/furo.js"></script>
<style>body { background: url(_static/bg.png) }</style></head>
<body><a href="https://www.djangoproject.com/">Django</a><img src="_static/logo.png"
srcset="_static/logo.png 1x, _static/logo@2x.png 2x"></body></html>"""


@pytest.mark.parametrize(
    "remote",
    [
        '<script src="https://cdn.jsdelivr.net/npm/swagger-ui-dist/swagger-ui-bundle.js"></script>',
        '<link rel="stylesheet" href="//fonts.example.com/css">',
        '<img src="http://example.com/a.png">',
        '<img src="a.png" srcset="a.png 1x, https://example.com/b.png 2x">',
        '<iframe src="https://example.com/embed"></iframe>',
        "<style>@import url(https://example.com/x.css);</style>",
        "<div style=\"background: url('https://example.com/bg.png')\"></div>",
        "<p>fonts.googleapis.com</p>",
    ],
)
def test_a_page_loading_from_the_network_fails_the_check(tmp_path, capsys, remote):
    (tmp_path / "index.html").write_text(LOCAL_PAGE)
    (tmp_path / "bad.html").write_text("<html><body>%s</body></html>" % remote)

    assert check_offline.main(["check_offline.py", str(tmp_path)]) == 1
    assert "bad.html: loads" in capsys.readouterr().err


def test_a_stylesheet_with_a_remote_font_fails_the_check(tmp_path, capsys):
    (tmp_path / "index.html").write_text(LOCAL_PAGE)
    (tmp_path / "theme.css").write_text(
        '@font-face { font-family: X; src: url("https://example.com/x.woff2") }'
    )

    assert check_offline.main(["check_offline.py", str(tmp_path)]) == 1
    assert "theme.css: loads https://example.com/x.woff2" in capsys.readouterr().err


def test_local_assets_and_links_a_reader_clicks_pass(tmp_path, capsys):
    (tmp_path / "index.html").write_text(LOCAL_PAGE)
    (tmp_path / "theme.css").write_text("body { background: url(bg.png) }")

    assert check_offline.main(["check_offline.py", str(tmp_path)]) == 0
    assert "nothing loads from the network" in capsys.readouterr().out


def test_an_empty_build_directory_fails_the_check(tmp_path):
    assert check_offline.main(["check_offline.py", str(tmp_path)]) == 1
