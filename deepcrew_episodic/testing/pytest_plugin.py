"""The conformance kit's report: what each provider declared, and what it passed.

At the end of a pytest run that ran kit tests, the terminal shows one block per provider's
test class::

    ========================= provider conformance =========================
    TestPostgresProvider (PostgresProvider): FAILED atomic counters
      key/value contract   required        9 passed
      atomic counters      required        7 passed, 1 failed
      multi-process        declared        5 passed
      episode log          required       61 passed

Nothing to configure: the kit's tests register this plugin when the first of them runs. Under
pytest-xdist the report is printed by the main process, which runs no test: there the plugin
has to be loaded at start-up: ``-p deepcrew_episodic.testing.pytest_plugin`` (or a ``pytest11``
entry point of that name). ``-p no:deepcrew_episodic.testing.pytest_plugin`` turns it off.

This module imports nothing but pytest: pytest may load it in any project's run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import pytest

__all__ = ["NAME", "declare", "register", "tag"]

NAME = __name__
"""The plugin's name: its module's, so that ``-p deepcrew_episodic.testing.pytest_plugin`` and
an entry point of that name load it once, and ``-p no:`` that name blocks it."""

_CAPABILITY = "deepcrew_episodic.capability"
_DECLARED = "deepcrew_episodic.declared"
_ORDER = {"failed": 2, "skipped": 1, "passed": 0}


@dataclass
class _Test:
    group: str
    capability: str
    provider: str = ""
    states: list[tuple[str, str, bool]] = field(default_factory=list)
    outcome: str = ""


_REPORT = pytest.StashKey["_Report"]()


def register(config: pytest.Config) -> None:
    """Start the report in *config*'s run, unless it is started already or the plugin is
    blocked (``-p no:deepcrew_episodic.testing.pytest_plugin``)."""
    if _REPORT not in config.stash and not config.pluginmanager.is_blocked(NAME):
        report = config.stash[_REPORT] = _Report()
        config.pluginmanager.register(report, f"{NAME}.report")


def tag(item: pytest.Item, group: str, capability: str) -> None:
    """Say which provider's class (*group*) and which *capability* the test *item* is of."""
    item.user_properties.append((_CAPABILITY, {"group": group, "capability": capability}))


def declare(item: pytest.Item, provider: str, states: Sequence[tuple[str, str, bool]]) -> None:
    """Say what the *provider* class under the test *item* declares: for each capability its
    name, ``required``/``declared``/``not declared``, and whether the test's class has it."""
    rows = [[name, state, included] for name, state, included in states]
    item.user_properties.append((_DECLARED, {"provider": provider, "states": rows}))


def pytest_configure(config: pytest.Config) -> None:
    """Loaded at start-up (the entry point, ``-p``): the report is there from the start, in
    the main process of an xdist run too."""
    register(config)


class _Report:
    """One run's tally (one per ``pytest.Config``: a run nested in a test has its own)."""

    def __init__(self) -> None:
        self.tests: dict[str, _Test] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        properties = {name: value for name, value in report.user_properties}
        where = properties.get(_CAPABILITY)
        if not isinstance(where, dict):
            return
        test = self.tests.setdefault(report.nodeid, _Test(where["group"], where["capability"]))
        declared = properties.get(_DECLARED)
        if isinstance(declared, dict):
            test.provider = declared["provider"]
            test.states = [(str(n), str(s), bool(i)) for n, s, i in declared["states"]]
        outcome = "failed" if report.failed else "skipped" if report.skipped else ""
        if report.when == "call" and report.passed:
            outcome = "passed"
        if outcome and _ORDER[outcome] >= _ORDER.get(test.outcome, -1):
            test.outcome = outcome

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.tests:
            return
        terminalreporter.write_sep("=", "provider conformance")
        for line, markup in _lines(self.tests.values()):
            terminalreporter.write_line(line, **markup)


# --- the report ---------------------------------------------------------------------------


def _lines(every: Iterable[_Test]) -> list[tuple[str, dict[str, bool]]]:
    every = list(every)
    # A test whose store did not open (skipped there: a backend the store cannot run on, say)
    # names no provider: it belongs with the class's tests that did open one.
    opened = {test.group: test.provider for test in every if test.provider}
    groups: dict[tuple[str, str], list[_Test]] = {}
    for test in every:
        provider = test.provider or opened.get(test.group, "")
        groups.setdefault((test.group, provider), []).append(test)
    width = max(len(name) for t in every for name in [t.capability, *(s[0] for s in t.states)])
    lines: list[tuple[str, dict[str, bool]]] = []
    for (group, provider), tests in groups.items():
        states = next((t.states for t in tests if t.states), [])
        names = [name for name, _, _ in states] or list(dict.fromkeys(t.capability for t in tests))
        declared = {name: state for name, state, _ in states}
        included = {name for name, _, has in states if has}
        counts: dict[str, dict[str, int]] = {name: {} for name in names}
        for test in tests:
            per = counts.setdefault(test.capability, {})
            outcome = test.outcome or "not run"
            per[outcome] = per.get(outcome, 0) + 1
        failed = [name for name, per in counts.items() if per.get("failed")]
        # what the provider must pass (required, or declared) and no test showed it passing
        unshown = [
            name
            for name in names
            if declared.get(name) in ("required", "declared") and not counts[name].get("passed")
        ]
        heading = f"{group} ({provider or 'the store did not open'})"
        if failed:
            lines.append((f"{heading}: FAILED {', '.join(failed)}", {"red": True, "bold": True}))
        elif not any(per.get("passed") for per in counts.values()):
            lines.append((f"{heading}: no test passed", {"yellow": True, "bold": True}))
        elif unshown:
            verdict = f"passed what ran; not shown to pass: {', '.join(unshown)}"
            lines.append((f"{heading}: {verdict}", {"yellow": True, "bold": True}))
        else:
            verdict = "passed every capability it declares"
            lines.append((f"{heading}: {verdict}", {"green": True, "bold": True}))
        for name, per in counts.items():
            state = declared.get(name, "")
            if per:
                shown = ", ".join(
                    f"{per[o]} {o}" for o in ("passed", "failed", "skipped", "not run") if o in per
                )
            elif name in included:
                shown = "no test selected"
            else:
                shown = "not tested (not a base of the class)"
            lines.append((f"  {name:<{width}}  {state:<12}  {shown}", {"red": name in failed}))
    return lines
