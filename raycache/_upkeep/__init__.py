"""UPKEEP: verify, repair, gc, du and stray files of a store."""
