"""`python -m transpiler` runs the command line."""

from transpiler.cli import main

main(prog_name="transpile")
