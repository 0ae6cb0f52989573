"""The package's one version string (``pyproject.toml`` and the docs read it from here)."""

__version__ = "0.1.0"
