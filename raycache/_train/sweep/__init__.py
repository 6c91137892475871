"""Many heads in one pass: the sweep's grid, its members as one module, stacked linear heads."""
