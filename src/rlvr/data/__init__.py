"""Datasets shared by the environments: synthetic generators (offline defaults) and loaders of real data."""
