"""The trainer's error: a job that cannot run as asked (raised from planning to publishing)."""

from __future__ import annotations


class TrainingError(Exception):
    """A job that cannot run as asked; `str()` is one line for the job's error field."""
