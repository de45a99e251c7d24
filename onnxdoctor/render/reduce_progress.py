"""The status line `reduce` and `diagnose --reduce` show on a terminal while candidates run."""

from __future__ import annotations

from typing import Any


class ReduceProgress:
    """One status line on a terminal (rich), updated from the worker's `reduce_try` events;
    `diagnose --reduce` shows it too."""

    def __init__(self, *, enabled: bool) -> None:
        self.status: Any = None
        if enabled:
            from rich.console import Console

            self.status = Console(stderr=True).status("reduce: running the original model")
            self.status.start()

    def __call__(self, event: dict[str, Any]) -> None:
        if self.status is None:
            return
        if event.get("event") == "reduce_try":
            verdict = "fails the same way" if event.get("same") else "does not"
            self.status.update(f"reduce: candidate {event.get('tried')} ({event.get('size')} {event.get('unit')}): {verdict}")
        elif event.get("event") == "start" and event.get("run") == "main":
            self.status.update(f"reduce: {event.get('stage')}")

    def close(self) -> None:
        """Remove the status line."""
        if self.status is not None:
            self.status.stop()
