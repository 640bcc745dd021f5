"""The ``autarch`` command line."""
