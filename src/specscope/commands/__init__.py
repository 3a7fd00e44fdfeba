"""One module per CLI command; each exposes one function that typer wires up in `cli.py`."""
