"""COMPUTE: connecting to Ray, and sizing actor pools from the cluster."""
