"""The conformance kit's report: at the end of a run, what each provider declared and passed,
for a third party that only subclassed the kit (pytest run in a temporary project)."""

from __future__ import annotations

import re

import pytest

pytest_plugins = ["pytester"]

PROVIDERS = '''
import anyio
import pytest

from deepcrew_episodic.providers import InMemoryProvider
from deepcrew_episodic.testing import Store


class RacyCounters(InMemoryProvider):
    """Counts by reading, then writing: two tasks can take the same number."""

    async def increment(self, key, *, initial=0, repair=None):
        (held,) = await self.retrieve_many([key])
        if repair is not None or (held and not held.isdigit()):
            return await super().increment(key, initial=initial, repair=repair)
        await anyio.sleep(0)
        value = int(held or initial) + 1
        await self.write({key: str(value)})
        return value


class Shared(InMemoryProvider):
    shared_across_processes = True  # declared, never tested below


def open_racy(target):
    return RacyCounters()


def open_shared(target):
    return Shared()


def open_dict(target):
    return InMemoryProvider()


def never_opens(target):
    raise OSError("the database is not there")
'''


@pytest.fixture
def pytester(pytester: pytest.Pytester) -> pytest.Pytester:
    """A project of a third party: pytest-asyncio (installed here) wants its loop scope set."""
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    return pytester


def run(pytester: pytest.Pytester, tests: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(providers=PROVIDERS, test_provider=tests)
    return pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", *args)


def report(result: pytest.RunResult) -> list[str]:
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if "provider conformance" in line)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("=")), len(lines))
    return lines[start + 1 : end]


def counts(line: str) -> dict[str, int]:
    return {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped)", line)}


def test_a_provider_that_fails_one_capability_is_reported_failing_that_one_only(
    pytester: pytest.Pytester,
) -> None:
    result = run(
        pytester,
        """
        import pytest
        from deepcrew_episodic.testing import ProviderConformance, Store
        from providers import open_racy


        class TestRacy(ProviderConformance):
            @pytest.fixture
            def store(self):
                return Store(open_racy)
        """,
    )
    outcomes = result.parseoutcomes()
    failed = [line for line in result.outlines if line.startswith("FAILED ")]
    assert len(failed) == outcomes["failed"] >= 1  # once per anyio backend installed
    assert all("::test_increment_starts_at_initial_and_is_atomic[" in line for line in failed)
    heading, *rows = report(result)
    assert heading == "TestRacy (RacyCounters): FAILED atomic counters"
    by_name = {row.split("  ")[1].strip(): row for row in rows}
    assert list(by_name) == [
        "key/value contract",
        "atomic counters",
        "multi-process",
        "episode log",
        "in-store index",
    ]
    assert counts(by_name["atomic counters"])["failed"] == outcomes["failed"]
    assert counts(by_name["atomic counters"])["passed"] >= 5
    assert "required" in by_name["atomic counters"]
    for name in ("key/value contract", "episode log"):
        assert "required" in by_name[name]
        assert "failed" not in counts(by_name[name]), by_name[name]
        assert counts(by_name[name])["passed"] > 5
    for undeclared in ("multi-process", "in-store index"):
        assert "not declared" in by_name[undeclared]
        assert set(counts(by_name[undeclared])) == {"skipped"}
    # every test of the run is counted once, under one capability
    total = {"passed": 0, "failed": 0, "skipped": 0}
    for row in rows:
        for word, n in counts(row).items():
            total[word] += n
    assert total == {word: outcomes.get(word, 0) for word in total}


def test_the_report_shows_each_class_its_store_and_what_it_did_not_test(
    pytester: pytest.Pytester,
) -> None:
    result = run(
        pytester,
        """
        import pytest
        from deepcrew_episodic.testing import KeyValueContract, Store
        from providers import never_opens, open_dict, open_shared


        class TestOnlyKeys(KeyValueContract):
            @pytest.fixture
            def store(self):
                return Store(open_shared)

            def test_a_test_of_its_own_is_not_counted(self):
                pass


        class TestTwoStores(KeyValueContract):
            @pytest.fixture(params=["first", "second"])
            def store(self, request):
                return Store(open_dict, request.param)


        class TestMissing(KeyValueContract):
            @pytest.fixture
            def store(self):
                return Store(never_opens)
        """,
        "-k",
        "not undecodable and not any_text",
    )
    lines = report(result)
    kv = next(line for line in lines if "key/value contract" in line)
    per_class = counts(kv)["passed"]  # the kit's tests selected, times the anyio backends
    assert per_class >= 4
    assert lines == [
        "TestOnlyKeys (Shared): passed what ran; not shown to pass: atomic counters, "
        "multi-process, episode log",
        f"  key/value contract  required      {per_class} passed",
        "  atomic counters     required      not tested (not a base of the class)",
        "  multi-process       declared      not tested (not a base of the class)",
        "  episode log         required      not tested (not a base of the class)",
        "  in-store index      not declared  not tested (not a base of the class)",
        "TestTwoStores[first] (InMemoryProvider): passed what ran; not shown to pass: "
        "atomic counters, episode log",
        f"  key/value contract  required      {per_class} passed",
        "  atomic counters     required      not tested (not a base of the class)",
        "  multi-process       not declared  not tested (not a base of the class)",
        "  episode log         required      not tested (not a base of the class)",
        "  in-store index      not declared  not tested (not a base of the class)",
        "TestTwoStores[second] (InMemoryProvider): passed what ran; not shown to pass: "
        "atomic counters, episode log",
        f"  key/value contract  required      {per_class} passed",
        "  atomic counters     required      not tested (not a base of the class)",
        "  multi-process       not declared  not tested (not a base of the class)",
        "  episode log         required      not tested (not a base of the class)",
        "  in-store index      not declared  not tested (not a base of the class)",
        "TestMissing (the store did not open): FAILED key/value contract",
        f"  key/value contract                {per_class} failed",
    ]
    # the class's own (synchronous) test ran, and is no capability's
    assert result.parseoutcomes() == {
        "passed": 3 * per_class + 1,
        "errors": per_class,
        "deselected": result.parseoutcomes()["deselected"],
    }


def test_the_report_can_be_turned_off_and_is_absent_without_kit_tests(
    pytester: pytest.Pytester,
) -> None:
    kit = """
        import pytest
        from deepcrew_episodic.testing import KeyValueContract, Store
        from providers import open_dict


        class TestDict(KeyValueContract):
            @pytest.fixture
            def store(self):
                return Store(open_dict)
        """
    result = run(pytester, kit, "-p", "no:deepcrew_episodic.testing.pytest_plugin", "-k", "prefix")
    assert result.parseoutcomes()["passed"] >= 1
    assert "provider conformance" not in result.stdout.str()
    result = run(pytester, "def test_nothing_of_the_kit():\n    pass\n")
    assert result.parseoutcomes()["passed"] == 1
    assert "provider conformance" not in result.stdout.str()


@pytest.mark.slow
def test_under_xdist_the_main_process_prints_the_report_of_its_workers(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        providers=PROVIDERS,
        test_provider="""
        import pytest
        from deepcrew_episodic.testing import AtomicCounters, Store
        from providers import open_racy


        class TestRacy(AtomicCounters):
            @pytest.fixture
            def store(self):
                return Store(open_racy)
        """,
    )
    result = pytester.runpytest_subprocess(
        "-p", "deepcrew_episodic.testing.pytest_plugin", "-n", "2", "-p", "no:randomly"
    )
    assert result.stdout.str().count("provider conformance") == 1
    heading, *rows = report(result)
    assert heading == "TestRacy (RacyCounters): FAILED atomic counters"
    (atomic,) = [row for row in rows if "atomic counters" in row]
    assert counts(atomic)["failed"] == result.parseoutcomes()["failed"] >= 1
    assert counts(atomic)["passed"] == result.parseoutcomes()["passed"]


def test_a_capability_class_of_ones_own_gets_its_line_in_the_report(
    pytester: pytest.Pytester,
) -> None:
    """One more capability is one more class: it states its name and what declares it."""
    pytester.makepyfile(
        providers=PROVIDERS,
        test_provider="""
        import pytest
        from deepcrew_episodic.providers import InMemoryProvider
        from deepcrew_episodic.testing import Capability, KeyValueContract, Store


        class SortedKeys(InMemoryProvider):
            keeps_keys_sorted = True


        def open_sorted(target):
            return SortedKeys()


        class KeysInOrder(Capability):
            capability = "keys in order"
            declared_by = "keeps_keys_sorted"

            async def test_keys_come_back_in_order(self, provider):
                await provider.write({"b": "2", "a": "1"})
                assert await provider.keys("") == ["a", "b"]


        class TestSorted(KeyValueContract, KeysInOrder):
            @pytest.fixture
            def store(self):
                return Store(open_sorted)

            async def test_keys_returns_exactly_the_keys_that_start_with_the_prefix(self):
                pytest.skip("a kit test overridden still counts for its capability")


        class TestPlain(KeysInOrder):
            @pytest.fixture
            def store(self):
                return Store(lambda target: InMemoryProvider())
        """,
    )
    # in a process of its own: the new class registers itself for the rest of that process
    result = pytester.runpytest_subprocess("-p", "no:randomly", "-k", "order or prefix")
    lines = report(result)
    backends = result.parseoutcomes()["passed"]  # TestSorted's own, once per anyio backend
    assert result.parseoutcomes()["skipped"] == 2 * backends
    assert lines[0] == (
        "TestSorted (SortedKeys): passed what ran; not shown to pass: "
        "key/value contract, atomic counters, episode log"
    )
    assert lines[1] == f"  key/value contract  required      {backends} skipped"
    assert lines[6] == f"  keys in order       declared      {backends} passed"
    assert lines[7] == "TestPlain (InMemoryProvider): no test passed"
    assert lines[13] == f"  keys in order       not declared  {backends} skipped"


def test_a_store_skipped_on_one_backend_is_counted_with_its_provider(
    pytester: pytest.Pytester,
) -> None:
    pytest.importorskip("trio")
    result = run(
        pytester,
        """
        import pytest
        from deepcrew_episodic.testing import KeyValueContract, Store
        from providers import open_dict


        class TestAsyncioOnly(KeyValueContract):
            @pytest.fixture
            def store(self, anyio_backend):
                if anyio_backend == "trio":
                    pytest.skip("this store's client is asyncio-only")
                return Store(open_dict)
        """,
        "-k",
        "prefix",
    )
    assert report(result)[:2] == [
        "TestAsyncioOnly (InMemoryProvider): passed what ran; not shown to pass: "
        "atomic counters, episode log",
        "  key/value contract  required      1 passed, 1 skipped",
    ]
