"""Test support shared by the test modules: builders, worlds, oracles and expectations (no tests here)."""
