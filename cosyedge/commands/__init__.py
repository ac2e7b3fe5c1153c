"""One module per CLI command; see cosyedge/cli.py."""
