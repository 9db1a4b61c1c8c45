"""The console's screens: one module (and one .tcss beside it) per screen."""
