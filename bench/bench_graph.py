"""Benchmark `onnxdoctor graph` against the naive net_drawer approach, as ratios in one run.

For synthetic models of 100, 1,000, 5,000 and 20,000 nodes (bench/synthetic.py: chains with
branches, residual edges, per-node weights and three If bodies) this times, from process start to
the written file:

- ours:  `python -m onnxdoctor.cli graph model.onnx --svg|--png --max-nodes 0` (everything drawn);
- naive: a script that builds net_drawer's picture with pydot (every op a box, every tensor,
  weights included, an ellipse) and runs `dot` on it, as `onnx.tools.net_drawer` + `dot` did.

The naive run gets a timeout (default 120 s) and is reported as ">120 s" when it hits it; once
it has timed out at one size, larger sizes are not run (they can only be slower) unless `--full`.
If a `graphviz-pure` binary is on PATH (or given with --graphviz-pure), the naive SVG is also
timed with it, for the question of offering it as a faster renderer.

Usage: python bench/bench_graph.py [--sizes 100,1000,5000,20000] [--timeout 120] [--full]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import count_nodes, synthetic_model

NAIVE = r"""
import subprocess, sys
import onnx, pydot
model = onnx.load(sys.argv[1], load_external_data=False)
graph = pydot.Dot("net", graph_type="digraph", rankdir="TB")
seen = set()
def tensor(name):
    key = "t_" + name
    if key not in seen:
        seen.add(key)
        graph.add_node(pydot.Node(key, label='"%s"' % name.replace('"', '\\"'), shape="ellipse"))
    return key
stack = [model.graph]
count = 0
while stack:
    g = stack.pop()
    for node in g.node:
        count += 1
        op = "op%d" % count
        graph.add_node(pydot.Node(op, label='"%s\\n%s"' % (node.op_type, node.name), shape="box",
                                  style="filled", fillcolor="#dbe9f6"))
        for name in node.input:
            if name:
                graph.add_edge(pydot.Edge(tensor(name), op))
        for name in node.output:
            if name:
                graph.add_edge(pydot.Edge(op, tensor(name)))
        for attr in node.attribute:
            if attr.HasField("g"):
                stack.append(attr.g)
            stack.extend(attr.graphs)
fmt, out, program = sys.argv[2], sys.argv[3], sys.argv[4]
args = [program] + (["-Kdot"] if "graphviz-pure" in program else []) + ["-T" + fmt, "-o", out]
subprocess.run(args, input=graph.to_string().encode(), check=True)
"""


def _timed(args: list[str], timeout: float, out: Path, ok: tuple[int, ...] = (0,)) -> float | None:
    """Wall seconds from process start to exit; None on timeout (the process group is killed).

    Raises:
        RuntimeError: the process failed or did not write `out`.
    """
    out.unlink(missing_ok=True)
    started = time.perf_counter()
    proc = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        return None
    seconds = time.perf_counter() - started
    if proc.returncode not in ok or not out.is_file() or out.stat().st_size == 0:
        raise RuntimeError(
            f"{' '.join(args[:4])}... failed (exit {proc.returncode}, {out.name} "
            f"{'written' if out.is_file() else 'missing'}): {err.decode(errors='replace')[-500:]}"
        )
    return seconds


def _fmt(seconds: float | None, timeout: float, skipped: bool = False) -> str:
    if skipped:
        return f"(>{timeout:.0f} s)"
    return f">{timeout:.0f} s" if seconds is None else f"{seconds:.2f} s"


def _ratio(naive: float | None, ours: float | None, timeout: float) -> str:
    if ours is None:
        return "-"
    if naive is None:
        return f">{timeout / ours:.0f}x"
    return f"{naive / ours:.1f}x"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,5000,20000")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--full", action="store_true", help="run naive sizes even after a timeout")
    parser.add_argument("--graphviz-pure", default=shutil.which("graphviz-pure"))
    parser.add_argument("--keep", type=Path, default=None, help="keep the outputs in this folder")
    options = parser.parse_args()
    if shutil.which("dot") is None:
        print("Graphviz `dot` is not on PATH: apt-get install graphviz", file=sys.stderr)
        return 2
    sizes = [int(s) for s in options.sizes.split(",")]
    timeout = options.timeout
    work = Path(tempfile.mkdtemp(prefix="bench-graph-")) if options.keep is None else options.keep
    work.mkdir(parents=True, exist_ok=True)
    dot_version = subprocess.run(
        ["dot", "-V"], capture_output=True, text=True, check=False
    ).stderr.strip()
    print(f"{dot_version}; naive timeout {timeout:.0f} s; {os.cpu_count()} CPUs")
    header = (
        f"{'nodes':>6} | {'ours svg':>9} {'ours png':>9} | {'naive svg':>10} {'naive png':>10} | "
        f"{'svg ratio':>9} {'png ratio':>9}"
    )
    if options.graphviz_pure:
        header += f" | {'naive svg, graphviz-pure':>24}"
    print(header)
    print("-" * len(header))
    naive_timed_out = False
    pure_timed_out = False
    for size in sizes:
        model_path = work / f"synthetic_{size}.onnx"
        m = synthetic_model(size)
        assert count_nodes(m) == size
        model_path.write_bytes(m.SerializeToString())
        ours: dict[str, float | None] = {}
        naive: dict[str, float | None] = {}
        for fmt in ("svg", "png"):
            out = work / f"ours_{size}.{fmt}"
            ours[fmt] = _timed(
                [
                    sys.executable,
                    "-m",
                    "onnxdoctor.cli",
                    "graph",
                    str(model_path),
                    f"--{fmt}",
                    "-o",
                    str(out),
                    "--force",
                    "--max-nodes",
                    "0",
                ],
                timeout,
                out,
            )
        skip = naive_timed_out and not options.full
        png_skipped = skip
        for fmt in ("svg", "png"):
            if skip:
                naive[fmt] = None
                continue
            out = work / f"naive_{size}.{fmt}"
            naive[fmt] = _timed(
                [sys.executable, "-c", NAIVE, str(model_path), fmt, str(out), "dot"], timeout, out
            )
            if naive[fmt] is None:
                naive_timed_out = True
                if fmt == "svg":  # the PNG needs the same layout: it would time out as well
                    naive["png"] = None
                    png_skipped = True
                    break
        row = (
            f"{size:>6} | {_fmt(ours['svg'], timeout):>9} {_fmt(ours['png'], timeout):>9} | "
            f"{_fmt(naive['svg'], timeout, skip):>10} "
            f"{_fmt(naive['png'], timeout, png_skipped):>10} | "
            f"{_ratio(naive['svg'], ours['svg'], timeout):>9} "
            f"{_ratio(naive['png'], ours['png'], timeout):>9}"
        )
        if options.graphviz_pure:
            if pure_timed_out and not options.full:
                pure_text = f"(>{timeout:.0f} s)"
            else:
                out = work / f"pure_{size}.svg"
                pure = _timed(
                    [
                        sys.executable,
                        "-c",
                        NAIVE,
                        str(model_path),
                        "svg",
                        str(out),
                        options.graphviz_pure,
                    ],
                    timeout,
                    out,
                )
                pure_timed_out = pure is None
                pure_text = _fmt(pure, timeout)
            row += f" | {pure_text:>24}"
        print(row, flush=True)
    print(
        "ours: `onnxdoctor graph --max-nodes 0` from process start (Graphviz `dot` layout up to "
        "800 drawn nodes, our layered layout + `neato -n2` above). naive: net_drawer's picture "
        "(ops and tensors as nodes, weights included) through pydot and `dot`. (>N s): not run, "
        "a smaller model already exceeded the timeout. Ratios are naive / ours; '>' is a lower "
        "bound."
    )
    if options.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
