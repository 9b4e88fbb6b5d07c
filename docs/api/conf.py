"""Sphinx configuration of the API reference: ``python -m sphinx -W -b html docs/api OUT``."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # document this checkout's code, not an installed copy

project = "acep"
author = "the acep authors"
copyright = "the acep authors, Apache License 2.0"
release = "0.1.0"

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode"]
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the Parameters sections say the types
autodoc_default_options = {"members": False}
html_theme = "alabaster"
exclude_patterns = ["_build"]
