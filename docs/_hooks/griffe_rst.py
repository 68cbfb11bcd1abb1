"""A griffe extension: the reStructuredText in the package's docstrings, read as Markdown.

The docstrings are NumPy-style, with reST's literal blocks (``text::`` and an indented block,
``Example::``) and roles (``:class:`~deepcrew_episodic.EpisodicHook```). Rendered as they are,
an ``Example::`` after a ``Parameters`` section reads as one more parameter, and a block's
brackets as Markdown links. This turns, in what the site renders (the source is untouched):

* an ``Example::`` (or ``Example (a caption)::``) line at the margin into an ``Examples`` section
  holding a fenced block;
* any other literal block (after a summary line: the rest of the docstring) into a fenced block (``python`` when it parses as Python, else
  ``text``), its ``::`` into ``:``;
* a role into inline code of the name it shows (``~`` keeps the last part, as Sphinx does);
* a parameter entry that names several (``temperature, max_tokens:``) into one entry each, with
  the same text (griffe would give them all the type and default of the first).
"""

from __future__ import annotations

import ast
import re
import textwrap
from typing import Any

from griffe import Extension

ROLE = re.compile(r":(?:class|func|meth|attr|mod|exc|data|obj|const|term):`(?P<target>[^`]+)`")
PARAMETER_SECTIONS = {"Parameters", "Other Parameters", "Attributes"}
EXAMPLE = re.compile(r"Example(?: \((?P<caption>[^)]+)\))?::")


def _shown(role: re.Match[str]) -> str:
    target = role["target"]
    if target.startswith("~"):
        target = target[1:].rsplit(".", 1)[-1]
    return f"`{target.lstrip('.')}`"


def _language(code: str) -> str:
    try:
        compile(code, "<docstring>", "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError:
        return "text"
    return "python"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _one_entry_per_parameter(lines: list[str]) -> list[str]:
    out: list[str] = []
    i, in_parameters = 0, False
    while i < len(lines):
        line = lines[i]
        if i + 1 < len(lines) and re.fullmatch(r"-{3,}", lines[i + 1].strip()) and line.strip():
            in_parameters = line.strip() in PARAMETER_SECTIONS
            out += [line, lines[i + 1]]
            i += 2
            continue
        if not in_parameters or not line.strip() or _indent(line) > 0:
            out.append(line)
            i += 1
            continue
        header = line.strip()
        while header.endswith(",") and i + 1 < len(lines) and _indent(lines[i + 1]) == 0:
            i += 1
            header += " " + lines[i].strip()
        end = i + 1
        while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > 0):
            end += 1
        names, colon, kind = header.partition(":")
        description = lines[i + 1 : end]
        for name in (n.strip() for n in names.split(",")):
            out += [f"{name}{colon}{kind}", *description]
        i = end
    return out


def markdown(docstring: str) -> str:
    lines = _one_entry_per_parameter(ROLE.sub(_shown, docstring).split("\n"))
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.rstrip().endswith("::"):
            out.append(line)
            i += 1
            continue
        margin = _indent(line)
        end = i + 1
        # A summary line's block is the rest (cleandoc leaves it at the summary's margin).
        while end < len(lines) and (
            i == 0 or not lines[end].strip() or _indent(lines[end]) > margin
        ):
            end += 1
        while end > i + 1 and not lines[end - 1].strip():
            end -= 1  # trailing blank lines stay after the block
        block = textwrap.dedent("\n".join(lines[i + 1 : end])).strip("\n")
        if not block:
            out.append(line)
            i += 1
            continue
        pad = " " * margin
        example = EXAMPLE.fullmatch(line.strip())
        if example and margin == 0:
            out += ["Examples", "--------"]
            if example["caption"]:
                caption = example["caption"]
                out += [f"{caption[0].upper()}{caption[1:]}:", ""]
        else:
            out += [line.rstrip()[:-1], ""]
        out.append(f"{pad}```{_language(block)}")
        out += [f"{pad}{code}" if code else "" for code in block.split("\n")]
        out.append(f"{pad}```")
        i = end
    return "\n".join(out)


class RestructuredText(Extension):
    def on_object(self, *, obj: Any, **kwargs: Any) -> None:
        if not obj.is_alias and obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
