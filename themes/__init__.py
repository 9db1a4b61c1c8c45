"""Theme files shipped with agent-console (see app/themes.py)."""
