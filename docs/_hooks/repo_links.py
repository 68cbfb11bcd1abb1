"""MkDocs hook: links from a page to a file of the repository outside ``docs/``.

A page may link to a source file, a benchmark or an example (``[examples/x.py](../examples/x.py)``):
the link works where the Markdown is read in the repository, but the site has no such page, and
MkDocs (rightly, under ``strict``) warns. This hook keeps those links correct in both places
without turning the warning off for every link:

* a target that does not exist in the repository is still a warning (so the build fails);
* a link to a module of the package whose text is one public name (``[`Episode`](...)``) becomes a
  link to that name's API reference page (an autorefs link: unresolved, it fails the build too);
* any other link to a file outside ``docs/`` is rendered as its text, unlinked.

Links between pages of ``docs/`` are left to MkDocs' own validation.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.repo_links")

FENCED = re.compile(r"^(`{3,}|~{3,}).*?^\1[ \t]*$", re.M | re.S)
LINK = re.compile(r"\[(?P<text>[^\]\n]+)\]\((?P<target>\.\./[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")
PUBLIC_NAME = re.compile(r"`(?P<name>[A-Za-z]\w*)`")


def on_page_markdown(markdown: str, page: Any, config: Any, **_: Any) -> str:
    docs = Path(config["docs_dir"]).resolve()
    repo = Path(config["config_file_path"]).resolve().parent
    here = (docs / page.file.src_path).parent

    def replace(link: re.Match[str]) -> str:
        target = (here / link["target"]).resolve()
        if target.is_relative_to(docs):
            return link[0]  # a page of the site: MkDocs checks it
        if not target.is_relative_to(repo) or not target.exists():
            log.warning(
                "Doc file '%s' links to '%s', which is not a file of the repository.",
                page.file.src_path,
                link["target"],
            )
            return link[0]
        name = PUBLIC_NAME.fullmatch(link["text"])
        if name and target.relative_to(repo).parts[0] == "deepcrew_episodic":
            return f"[{link['text']}][deepcrew_episodic.{name['name']}]"
        return link["text"]

    # Only prose: a link-like line in a code block is not a link.
    parts, start = [], 0
    for block in FENCED.finditer(markdown):
        parts.append(LINK.sub(replace, markdown[start : block.start()]))
        parts.append(block[0])
        start = block.end()
    parts.append(LINK.sub(replace, markdown[start:]))
    return "".join(parts)
