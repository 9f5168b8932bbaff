"""`python -m transpiler` runs the command line."""

from transpiler.cli.main import main

main(prog_name="transpile")
