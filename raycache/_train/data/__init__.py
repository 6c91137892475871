"""Where training rows come from: each worker's share, the split, views per epoch, the first
pass."""
