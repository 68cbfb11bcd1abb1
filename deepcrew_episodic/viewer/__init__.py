"""``deepcrew-episodic serve``: a local web viewer over an episodic memory.

The timeline (filters, search, pages), one episode with its grades and its run, the recall
playground (the exact block a task would get, each score broken down), and an overview
(outcomes over time, histogram, warnings, counters). Read-only unless created with
``allow_forget=True``. See docs/viewer.md.

Needs ``pip install 'deepcrew-episodic[ui]'`` (Starlette, uvicorn, Jinja2, python-multipart).

Example::

    import secrets
    from deepcrew_episodic.viewer import create_app

    app = create_app(memory, token=secrets.token_urlsafe(32))   # any ASGI server runs it
"""

from __future__ import annotations

import importlib.util

from .. import MissingDependencyError

INSTALL_HINT = "pip install 'deepcrew-episodic[ui]'"


def _missing() -> list[str]:
    """The distributions of the 'ui' extra that cannot be imported."""
    wanted = {
        "starlette": ("starlette",),
        "jinja2": ("jinja2",),
        # Starlette's form parser; older releases are imported as `multipart`.
        "python-multipart": ("python_multipart", "multipart"),
    }
    return [
        name
        for name, modules in wanted.items()
        if not any(importlib.util.find_spec(m) is not None for m in modules)
    ]


if _missing():
    raise MissingDependencyError(
        f"the viewer needs the 'ui' extra ({', '.join(_missing())} missing): {INSTALL_HINT}"
    )

# Imported after the check, so that a missing extra gives the install hint, not an ImportError.
from ._app import COOKIE, CSP, create_app  # noqa: E402
from ._safe import visible  # noqa: E402

__all__ = ["COOKIE", "CSP", "INSTALL_HINT", "create_app", "visible"]
