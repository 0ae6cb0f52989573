"""Sphinx configuration: builds offline, warnings are errors (``-W`` in the build command)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "hiclass_parallel"
author = "hiclass_parallel developers"
copyright = "2026, hiclass_parallel developers"
import hiclass_parallel  # noqa: E402

release = hiclass_parallel.__version__  # the one version string

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
autosummary_generate = True
autodoc_typehints = "none"  # numpydoc renders the types from the docstrings
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
myst_heading_anchors = 3
html_theme = "alabaster"
html_static_path = ["_static"]
# Optional heavy dependencies are mocked so the API pages build without them.
autodoc_mock_imports = ["cupy", "nltk", "hiclass"]
suppress_warnings = ["myst.header"]

# The examples as a gallery, built by the docs build. Only the quick examples run (the docs build
# runs after the test suite in CI, on 2 cores); the ones that train on WordNet glosses or sweep
# data sizes are rendered without running (the test suite runs every example).
sphinx_gallery_conf = {
    "examples_dirs": "../examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"(product_taxonomy|paper_toy_tree|mixed_depth_terminal|gpu_tensor_ops|explain_and_grow)\.py$",
    "within_subsection_order": "sphinx_gallery.sorting.FileNameSortKey",
    "download_all_examples": False,
    "remove_config_comments": True,
    "image_scrapers": ("matplotlib",),
    "matplotlib_animations": False,
}
