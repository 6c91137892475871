"""COMPUTE: connecting to Ray, sizing actor pools, and the stage runner of fill and predict."""
