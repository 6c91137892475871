"""Where training rows come from: each worker's part, the split, views per epoch, the first
pass."""
