"""PREDICT: a trained head (its frozen encoders live, then the head) over a file."""
