"""FILL: plan (checks and fingerprint), run (read, prepare, encode, write), commit; reuse and
views."""
