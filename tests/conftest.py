"""The suite's schedule on two workers: the longest work first, and shared fixtures kept together.

pyproject.toml runs the suite with `-n 2 --dist loadgroup`: xdist hands out one work unit at a
time, in collection order. Ordered longest first (seconds from tests/durations.json, which
bench/suite_profile.py writes from a `--durations` log), that is the longest-processing-time
schedule: no minute-long test starts last while the other worker has nothing left to do.

A test that uses a module- or class-scoped fixture stays in one unit with the rest of its module,
in the module's own order: scattered over workers or between other modules' tests, the fixture
would be built again each time pytest left and re-entered the module. Session fixtures are built
once per worker whatever the order.
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


def _unit(item: pytest.Item) -> str:
    """The work unit a test belongs to: its module when it shares a fixture wider than itself."""
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        if any(d.scope in SHARED_SCOPES for d in defs):
            return item.nodeid.split("::", 1)[0]
    return item.nodeid


def schedule(items: list[pytest.Item], seconds: dict[str, float]) -> tuple[list[pytest.Item], dict[str, str]]:
    """Items reordered by unit, longest unit first (ties and unknown tests keep their order), and
    the group name of every test that must share a worker with others."""
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(_unit(item), []).append(item)
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
