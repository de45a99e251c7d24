"""Run `diagnose --json` on the corpus of failures reproduced from public issue threads.

Each script in fixtures/corpus/ states, in its docstring, the thread it reproduces and what
onnxdoctor should report: `Expected: OD202 naming aten::cumprod; fix family: rewrite` for a
failure, `Expected: healthy; ...` for a model that used to fail and exports cleanly today (a
false alarm there is a bug). Prints one line per file, then the totals:

    verified fix N/M (K without a Python kernel), op named N/M, expected family N/M, healthy N/K (no false alarm)

"without a Python kernel" leaves out fixes whose model runs an op as Python code inside ONNX
Runtime (PYTHON_KERNEL_KINDS): they are verified, but the serving process needs Python and torch.
"op named" counts only the files whose `Expected:` line names an op (`naming <op>`), and takes the
op under either of the names a finding gives it (`op`, `onnx_op`, `torch_op`): `TopK` or
`aten::topk`. Runs recorded before those fields existed (first-seen records up to 2026-12-04f)
counted `op` alone. A lowercase op without a namespace (`upsample_trilinear3d`) is the aten op of
that name, and an operator's dunder spelling in the traced graph (`aten::__xor__`) is the op it
calls (`aten::bitwise_xor`); both readings came after some first-seen runs, whose README sections
give the figure both ways.

Not part of the test suite (each file is a real export plus fix verification: minutes in all).

Usage: python bench/corpus.py [--jobs N] [--only SUBSTRING] [--files A.py B.py ...] [--list FILE]
                               [--record RUN.json] [--compare RUN.json]

`--files` and `--list` (a text file, one corpus file a line, `#` comments allowed) run only those
files and print the same totals for that subset: how the first-seen figure in
fixtures/corpus/README.md is measured (the files added in one batch, before any code change).

`--record RUN.json` keeps the run (commit, time, each file's outcome); `--compare RUN.json` prints,
after this run, the files whose outcome changed since the recorded one and both totals. A batch's
first-seen run is recorded beside its list (`first_seen_<date>.run.json`), so

    python bench/corpus.py --list fixtures/corpus/first_seen_2026-12-04b.txt \
        --compare fixtures/corpus/first_seen_2026-12-04b.run.json

prints that batch's first-seen figure and its figure on today's code.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fixtures" / "corpus"
EXPECTED = re.compile(r"^Expected: (OD\d{3}|healthy)(?: naming (\S+))?; fix family: (.+?)\.?$", re.MULTILINE)


@dataclass(frozen=True)
class Expectation:
    """What a corpus file's docstring says onnxdoctor should find."""

    code: str | None  # None: healthy
    op: str | None
    families: tuple[str, ...]


@dataclass(frozen=True)
class Outcome:
    """What `diagnose --json` reported for one corpus file."""

    name: str
    expected: Expectation
    exit_code: int
    codes: tuple[str, ...]
    ops: tuple[str, ...]
    verified_kinds: tuple[str, ...]
    seconds: float
    error: str = ""
    # Verified fixes none of whose steps runs a Python kernel inside ONNX Runtime.
    native_kinds: tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        # OD801 (a fixed-size export: nothing declared dynamic) is a warning every such model
        # gets by design (issue 18), not a false alarm.
        return self.exit_code == 0 and not [c for c in self.codes if c != "OD801"]

    @property
    def op_named(self) -> bool:
        expected = self.expected.op
        if expected is None:
            return False
        namespace, dot, name = expected.partition(".")
        if "::" not in expected and dot and namespace in _TORCH_NAMESPACES:
            # torch's OpOverload spelling (`aten._sparse_addmm.default`, as the dynamo exporter's
            # "No ONNX function found" prints it) is the op `aten::_sparse_addmm`.
            expected = f"{namespace}::{name}"
        if "::" not in expected:
            # An ONNX op named without its domain (`MatMulNBits`) is the tool's
            # `com.microsoft::MatMulNBits`: the domain qualifies the name, it names no other op.
            # A lowercase one (`upsample_trilinear3d`, `_upsample_bicubic2d_aa`) is no ONNX op type:
            # an aten op's name.
            return any(_bare(o) == expected or (o.split("::", 1)[0] not in _TORCH_NAMESPACES
                                                and o.split("::", 1)[-1] == expected)
                       or (expected.lstrip("_")[:1].islower() and _bare(o) == _bare(f"aten::{expected}")) for o in self.ops)
        return any(_bare(o) == _bare(expected) for o in self.ops)

    @property
    def verified(self) -> bool:
        return bool(self.verified_kinds)

    @property
    def verified_native(self) -> bool:
        return bool(self.native_kinds)

    @property
    def code_matched(self) -> bool:
        return self.expected.code is not None and self.expected.code in self.codes

    @property
    def family_matched(self) -> bool:
        return any(kind in self.expected.families for kind in self.verified_kinds)


# Fixes whose model runs some op as Python code inside ONNX Runtime (onnxruntime-extensions):
# verified, but the serving process needs Python (and torch), so the summary counts them apart.
PYTHON_KERNEL_KINDS = frozenset({"aten_kernel_dynamo", "aten_kernel_torchscript", "function_kernel",
                                 "runtime_kernel_python", "custom_op_dynamo", "custom_op_torchscript"})


# Namespaces of torch's ops: `aten::lt` does not name an ONNX op `lt`.
_TORCH_NAMESPACES = frozenset({"aten", "prims", "prim", "quantized", "torch", "builtins"})


def _bare(op: str) -> str:
    # A Python builtin has no namespace in an Expected line (`round`); the tool qualifies it
    # (`builtins::round`), as the exporter's message does.
    op = op.removeprefix("builtins::")
    op = op.split(".", 1)[0] if "::" in op else op
    # The traced graph spells Python's operators as dunders (`aten::__xor__`, also torch's
    # in-place `__ixor__` and its symbolic's `__xor_`); the tool names the op they call
    # (`aten::bitwise_xor`). Either name is the same op.
    return _DUNDERS.get(op.rstrip("_").replace("::__i", "::__"), op)


_DUNDERS = {f"aten::__{python}": f"aten::bitwise_{name}" for python, name in
            (("and", "and"), ("or", "or"), ("xor", "xor"), ("lshift", "left_shift"), ("rshift", "right_shift"),
             ("not", "not"))}


def expectation(path: Path) -> Expectation:
    """The `Expected:` line of a corpus file's docstring."""
    doc = ast.get_docstring(ast.parse(path.read_text("utf-8"))) or ""
    match = EXPECTED.search(doc)
    if match is None:
        raise SystemExit(f"{path.name}: no 'Expected: ...' line in its docstring")
    code, op, families = match.groups()
    return Expectation(
        code=None if code == "healthy" else code,
        op=op,
        families=tuple(f.strip() for f in families.split(" or ") if f.strip() not in ("-", "")),
    )


def diagnose(path: Path) -> Outcome:
    """`python -m onnxdoctor diagnose --json PATH`, parsed."""
    expected = expectation(path)
    started = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "onnxdoctor", "diagnose", "--json", str(path)],
        check=False, capture_output=True, text=True, env=env, cwd=ROOT, timeout=900,
    )
    seconds = time.perf_counter() - started
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return Outcome(path.stem, expected, proc.returncode, (), (), (), seconds,
                       error=(proc.stderr.strip().splitlines() or ["no JSON"])[-1])
    # Errors, and the warning a file expects (OD801: ONNX Runtime refuses the sizes PyTorch runs,
    # which is what the thread reported): its verified fix answers the file as an error's would.
    findings = [f for f in data.get("findings", []) if f.get("severity") == "error"
                or (expected.code is not None and f.get("code") == expected.code)]
    return Outcome(
        name=path.stem,
        expected=expected,
        exit_code=proc.returncode,
        codes=tuple(f["code"] for f in findings),
        # The op under either of its names (the ONNX node's, the torch op's): a file may expect
        # `TopK` where the finding is about `aten::topk`, and both are printed to the user.
        ops=tuple(dict.fromkeys(name for f in findings for name in (f.get("op"), f.get("onnx_op"), f.get("torch_op"))
                                if name)),
        # A verified chain counts for its steps' families too (its own kind is "chain").
        verified_kinds=tuple(kind for f in findings for fix in f.get("fixes", []) if fix.get("verified")
                             for kind in (fix["kind"], *(fix.get("steps") or ()))),
        native_kinds=tuple(fix["kind"] for f in findings for fix in f.get("fixes", []) if fix.get("verified")
                           and not PYTHON_KERNEL_KINDS & {fix["kind"], *(fix.get("steps") or ())}),
        seconds=seconds,
    )


def _selected(files: list[str], list_file: str | None) -> list[Path] | None:
    """The corpus files named by --files and --list (None: neither was given)."""
    names = list(files)
    if list_file is not None:
        try:
            text = Path(list_file).read_text("utf-8")
        except OSError as exc:
            raise SystemExit(f"--list {list_file}: {exc.strerror or exc}") from None
        names += [line.split("#", 1)[0].strip() for line in text.splitlines()]
    names = [n for n in names if n]
    if not names and not files and list_file is None:
        return None
    paths = []
    for name in names:
        # A name may be bare (cumprod_pytorch_102948.py), without .py, or a path to the file.
        path = CORPUS / Path(name).name
        if path.suffix != ".py":
            path = path.with_name(path.name + ".py")
        if not path.is_file():
            raise SystemExit(f"{name}: no such file in {CORPUS.relative_to(ROOT)}")
        paths.append(path)
    if not paths:
        raise SystemExit("--files/--list named no corpus file")
    return sorted(set(paths))


def verdict(o: Outcome) -> str:
    """One file's outcome, as a line of the report."""
    if o.expected.code is None:
        return "healthy" if o.healthy else f"FALSE ALARM {','.join(o.codes) or o.error}"
    return (
        f"{','.join(o.codes) or '-'}{'' if o.code_matched else ' (expected ' + str(o.expected.code) + ')'}"
        f" op={'/'.join(o.ops) or '-'}"
        f"{'' if o.op_named or o.expected.op is None else ' (op NOT named)'} "
        f"fix={'/'.join(o.verified_kinds) or 'none verified'}"
        f"{'' if o.family_matched else ' (expected ' + ' or '.join(o.expected.families) + ')'}"
    )


def totals(outcomes: list[Outcome]) -> str:
    """The two summary lines for a set of outcomes."""
    failing = [o for o in outcomes if o.expected.code is not None]
    healthy = [o for o in outcomes if o.expected.code is None]
    # A parity mismatch or a bad dynamic_shapes spec has no op to name: counting those files as
    # "not named" would hide a naming regression behind a fixed, unreachable shortfall.
    naming = [o for o in failing if o.expected.op is not None]
    return (
        f"verified fix {sum(o.verified for o in failing)}/{len(failing)} "
        f"({sum(o.verified_native for o in failing)} without a Python kernel), "
        f"op named {sum(o.op_named for o in naming)}/{len(naming)}, "
        f"expected family {sum(o.family_matched for o in failing)}/{len(failing)}, "
        f"healthy {sum(o.healthy for o in healthy)}/{len(healthy)} (no false alarm)\n"
        f"expected code {sum(o.code_matched for o in failing)}/{len(failing)}"
    )


def _commit() -> str:
    proc = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                          check=False, capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"


def record(outcomes: list[Outcome], path: Path, started: datetime) -> None:
    """Write the run to PATH: the commit, when, and each file's outcome (Expected as read then)."""
    document = {
        "commit": _commit(),
        "started": started.isoformat(timespec="seconds"),
        "ended": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "outcomes": [asdict(o) for o in outcomes],
    }
    path.write_text(json.dumps(document, indent=1) + "\n", "utf-8")


def recorded(path: Path) -> tuple[dict[str, str], list[Outcome]]:
    """A run written by record(): its header and its outcomes."""
    try:
        document = json.loads(path.read_text("utf-8"))
        outcomes = [
            Outcome(**{**o, "expected": Expectation(**{k: tuple(v) if k == "families" else v
                                                       for k, v in o["expected"].items()}),
                       "codes": tuple(o["codes"]), "ops": tuple(o["ops"]),
                       "verified_kinds": tuple(o["verified_kinds"]),
                       "native_kinds": tuple(o.get("native_kinds", ()))})
            for o in document["outcomes"]
        ]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"--compare {path}: not a run written by --record ({exc})") from None
    return {k: document.get(k, "?") for k in ("commit", "started", "ended")}, outcomes


def compare(now: list[Outcome], path: Path) -> None:
    """Print what changed since the run recorded at PATH, then both figures."""
    header, then = recorded(path)
    before = {o.name: o for o in then}
    # The figures compare the same files: the recorded run's, as far as this run has them.
    common = [o for o in now if o.name in before]
    print()
    print(f"Changed since the run recorded in {path.name} ({header['commit']}, {header['started']}):")
    changed = [o for o in common if verdict(o) != verdict(before[o.name])]
    for o in changed:
        print(f"  {o.name:43s} then: {verdict(before[o.name])}")
        print(f"  {'':43s} now:  {verdict(o)}")
    if not changed:
        print("  nothing")
    missing = sorted(set(before) - {o.name for o in now})
    if missing:
        print(f"  not run now: {', '.join(missing)}")
    print()
    print(f"recorded ({header['commit']}):")
    print(totals([before[o.name] for o in common]))
    print("now:")
    print(totals(common))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1, help="files diagnosed at once")
    parser.add_argument("--only", default="", help="only files whose name contains this")
    parser.add_argument("--files", nargs="+", default=[], metavar="FILE",
                        help="only these corpus files (names or paths)")
    parser.add_argument("--list", dest="list_file", metavar="FILE",
                        help="only the corpus files named in FILE, one a line")
    parser.add_argument("--record", metavar="RUN.json", type=Path,
                        help="write this run's outcomes (and commit) to RUN.json")
    parser.add_argument("--compare", metavar="RUN.json", type=Path, action="append", default=[],
                        help="after the run, print what changed since the run recorded in RUN.json "
                             "(repeatable; each compares the files both runs have)")
    args = parser.parse_args()
    for path in args.compare:
        recorded(path)  # refuse a bad file before minutes of work
    chosen = _selected(args.files, args.list_file)
    pool_paths = chosen if chosen is not None else sorted(CORPUS.glob("*.py"))
    paths = [p for p in pool_paths if args.only in p.name]
    started = datetime.now(timezone.utc)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        outcomes = list(pool.map(diagnose, paths))
    for o in outcomes:
        print(f"{o.name:45s} {o.seconds:6.1f}s  {verdict(o)}{'  ' + o.error if o.error else ''}")
    print()
    print(totals(outcomes))
    if args.record is not None:
        record(outcomes, args.record, started)
    for path in args.compare:
        compare(outcomes, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
