"""`python -m specscope.engine.train_dflash`: the DFlash drafter trainer's entry point.

The trainer itself is the package engine/training/ (its docstring is the recipe, cli.py the
flags); this module only keeps the command's name.
"""

from specscope.engine.training.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
