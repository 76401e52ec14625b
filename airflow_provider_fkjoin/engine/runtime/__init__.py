"""The Spark runtime: the session, Spark and Delta internals behind a version check, expression checks."""
