"""The ``autoexp`` command line (``autoexp.cli.main:main``) and its sub-commands, one module each."""
