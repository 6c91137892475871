"""CACHE: the store (the only code touching storage), the manifest, shard columns, checked
reads, and committed caches as users see them."""
