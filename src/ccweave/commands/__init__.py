"""One module per ``ccweave`` subcommand (see :mod:`ccweave.cli`)."""
