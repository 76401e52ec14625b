"""Delta tables through Spark: handles and snapshots, change feeds, changelogs, state tables, ownership."""
