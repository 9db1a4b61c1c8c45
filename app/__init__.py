"""The Textual console and the command line. The only package that imports Textual."""

from __future__ import annotations

__version__ = "0.1.0"
