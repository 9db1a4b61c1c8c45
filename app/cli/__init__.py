"""The command line: `agent-console` and its subcommands (`main`), each in its own module
here; the console itself is the rest of `app`."""

from app.cli.main import main, run

__all__ = ["main", "run"]
