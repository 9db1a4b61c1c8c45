"""Helpers the tests share that are not fixtures: real artefacts built locally (no hub)."""
