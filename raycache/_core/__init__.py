"""Core: the config loader (knows no stage), fingerprints, secrets in storage options, units."""
