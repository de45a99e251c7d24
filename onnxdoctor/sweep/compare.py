"""`sweep --compare OLD.jsonl`: the models whose verdict or error codes changed between two sweeps
(the upgrade check). Models are matched by path, else by file content (a moved file)."""

from __future__ import annotations

from collections.abc import Sequence

from onnxdoctor.sweep.record import Change, Comparison, SweepResult, error_codes


def compare(old: Sequence[SweepResult], new: Sequence[SweepResult]) -> Comparison:
    """Pair each new result with the old one of the same model and list what changed."""
    by_target = {r.target: r for r in old}
    by_hash = {r.content_hash: r for r in old}
    changes: list[Change] = []
    same = 0
    matched: set[str] = set()
    only_new: list[str] = []
    for result in new:
        before = by_target.get(result.target) or by_hash.get(result.content_hash)
        if before is None:
            only_new.append(result.shown)
            continue
        matched.add(before.target)
        old_codes, new_codes = error_codes(before), error_codes(result)
        if before.verdict == result.verdict and old_codes == new_codes:
            same += 1
        else:
            changes.append(Change(result.shown, before.verdict, result.verdict, old_codes, new_codes))
    only_old = tuple(r.shown for r in old if r.target not in matched)
    return Comparison(tuple(changes), same, only_old, tuple(only_new))
