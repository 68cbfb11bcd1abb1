"""``python -m deepcrew_episodic``: the same command as ``deepcrew-episodic``."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
