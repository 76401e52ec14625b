"""The package version, in a leaf module so that the package and its provider metadata both read it."""

__version__ = "0.1.0"
