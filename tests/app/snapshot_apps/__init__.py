"""Apps the snapshot tests screenshot; each builds its own store from fixed texts."""
