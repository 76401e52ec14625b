"""One module per join kind: each holds its join's algorithm and uses the layers below for the rest."""
