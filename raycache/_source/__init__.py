"""SOURCE: the user's table: its config, its files and their versions, reading it in units."""
