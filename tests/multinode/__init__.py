"""tests/multinode as a package: its test_options.py and tests/serve/test_options.py share a basename, which
pytest's default import mode (rootdir-relative, no packages) cannot collect side by side."""
