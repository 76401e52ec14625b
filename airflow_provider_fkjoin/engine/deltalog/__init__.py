"""Delta logs read without a JVM (``deltalake``): high watermarks, progress, the no-JVM noop check."""
