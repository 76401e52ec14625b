"""Benchmarks of the engine on this machine: each runs as ``python -m bench.<name>`` from the repository's
root (``--help`` lists its flags), writes its report under ``bench/results/``, and is described, with its
current figures, in ``bench/README.md``."""
