"""The front end and driver of transpile: discovery, parsing, analysis, the lint engine, the CLI."""
