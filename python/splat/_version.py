"""The version: written only here (pyproject.toml reads it at build time)."""
__version__ = "0.2.0"
