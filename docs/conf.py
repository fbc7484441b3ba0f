"""Sphinx configuration: Markdown pages (MyST) and the furo theme, whose assets ship with it.

Build: sphinx-build -W --keep-going -b html docs docs/_build/html
"""

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path[:0] = [str(DOCS / "_ext"), str(DOCS.parent)]

project = "scheduler_app"
author = "scheduler_app contributors"
copyright = "scheduler_app contributors"

extensions = ["myst_parser", "settings_table", "test_references"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_ext"]
myst_heading_anchors = 3

html_theme = "furo"
html_title = "scheduler_app"
html_static_path = ["_static"]
html_css_files = ["settings-table.css"]
