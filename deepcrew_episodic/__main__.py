"""``python -m deepcrew_episodic``: the same command as ``deepcrew-episodic``."""

from ._cli import main

raise SystemExit(main())
