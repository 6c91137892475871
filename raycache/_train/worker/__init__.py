"""What runs in each training worker: the heads it builds, the loop of epochs and steps, a
linear head solved full batch, best epochs, a diverged loss, and checkpoints of its state."""
