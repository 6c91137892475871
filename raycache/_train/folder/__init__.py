"""A run folder under a cache's runs/: its record (run.json), its checkpoints, its metrics."""
