"""What runs on the driver: the plan (a config checked against the registries and the cache),
placement, the Ray Train run and its result, and the runs kept on storage."""
