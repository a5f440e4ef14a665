"""One module per CLI subcommand; each defines ``add_parser(subparsers)`` (see precision_lab/cli.py)."""
