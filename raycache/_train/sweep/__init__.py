"""Many heads in one pass: the sweep's grid, its members as one module, and stacks of linear
and MLP heads (a block per shape, one optimizer step per block)."""
