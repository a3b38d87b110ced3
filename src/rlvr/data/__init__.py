"""Datasets shared by the environments: synthetic generators (offline defaults) and loaders of real data."""

from rlvr.data.multihop import (
    MultiHopExample,
    Paragraph,
    load_multihop_file,
    load_multihop_hf,
    synthetic_multihop,
)

__all__ = ["MultiHopExample", "Paragraph", "load_multihop_file", "load_multihop_hf", "synthetic_multihop"]
