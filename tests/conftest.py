"""The suite's schedule on two workers: the longest work first, and shared fixtures kept together.

pyproject.toml runs the suite with `-n 2 --dist loadgroup`: xdist hands out one work unit at a
time, in collection order. Ordered longest first (seconds from tests/durations.json, which
bench/suite_profile.py writes from a `--durations` log), that is the longest-processing-time
schedule: no minute-long test starts last while the other worker has nothing left to do.

Tests that share a module- or class-scoped fixture form one unit, run by one worker in the
module's own order: scattered over workers or between other modules' tests, the fixture would be
built again each time pytest left and re-entered the module. A module's other tests stay units of
their own, so one module's tests still spread over both workers. Session fixtures are built once per
worker whatever the order.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parent / "durations.json"
SHARED_SCOPES = {"module", "class", "package"}


def _durations() -> dict[str, float]:
    try:
        table = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in table.items() if isinstance(v, (int, float))} if isinstance(table, dict) else {}


def _shared_fixtures(item: pytest.Item) -> list[str]:
    """The module-, class- or package-scoped fixtures a test uses, as `module::name`."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    module = item.nodeid.split("::", 1)[0]
    return sorted(f"{module}::{name}" for name, defs in info.name2fixturedefs.items()
                  if any(d.scope in SHARED_SCOPES for d in defs))


def _units(items: list[pytest.Item]) -> dict[str, list[pytest.Item]]:
    """Tests joined into one unit when they share such a fixture, directly or through another test
    (a union-find over fixture names); every other test is a unit of its own."""
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    shared = {item.nodeid: _shared_fixtures(item) for item in items}
    for names in shared.values():
        for name in names[1:]:
            parent[root(name)] = root(names[0])
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        names = shared[item.nodeid]
        units.setdefault(root(names[0]) if names else item.nodeid, []).append(item)
    return units


def schedule(items: list[pytest.Item], seconds: dict[str, float]) -> tuple[list[pytest.Item], dict[str, str]]:
    """Items reordered by unit, longest unit first (ties and unknown tests keep their order), and
    the group name of every test that must share a worker with others."""
    units = _units(items)
    weight = {u: sum(seconds.get(i.nodeid, 0.0) for i in members) for u, members in units.items()}
    order = sorted(units, key=lambda u: -weight[u])  # sorted() is stable: unknown tests keep their order
    groups = {i.nodeid: u for u, members in units.items() if len(members) > 1 for i in members}
    return [i for u in order for i in units[u]], groups


# Before xdist's own hook, which appends the group to each grouped test's id.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ordered, groups = schedule(items, _durations())
    items[:] = ordered
    for item in items:
        if item.nodeid in groups:
            item.add_marker(pytest.mark.xdist_group(name=groups[item.nodeid]))
