"""python -m kiln ...: the kiln CLI."""
from ._cli import main

main()
