"""Our own layered layout for graphs too big for Graphviz's dot: positions for `neato -n2`."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping

from onnxdoctor.graph.collect import _Cluster
from onnxdoctor.graph.drawing import (
    _EDGE_DEFAULTS,
    _NODE_DEFAULTS,
    DrawOptions,
    _Edge,
    _Element,
    _graph_defaults,
    dot_quote,
)

_X_GAP = 0.35  # inches between boxes in a layer


_Y_GAP = 0.45  # inches between layers


def _layers(elements: list[_Element], edges: list[_Edge]) -> dict[str, int]:
    """Longest-path layering in model order; edges that point backwards (cycles) are ignored."""
    index = {e.id: k for k, e in enumerate(elements)}
    preds: dict[str, list[str]] = defaultdict(list)
    succs: dict[str, list[str]] = defaultdict(list)
    for edge in edges:
        if edge.src in index and edge.dst in index and edge.src != edge.dst:
            preds[edge.dst].append(edge.src)
            succs[edge.src].append(edge.dst)
    # Kahn's algorithm; on a cycle, release the earliest waiting element.
    indegree = {e.id: len(preds[e.id]) for e in elements}
    ready = deque(e.id for e in elements if indegree[e.id] == 0)
    layer: dict[str, int] = {}
    done: set[str] = set()
    waiting = [e.id for e in elements]
    position = 0
    while len(done) < len(elements):
        if not ready:
            while waiting[position] in done:
                position += 1
            ready.append(waiting[position])
        current = ready.popleft()
        if current in done:
            continue
        done.add(current)
        layer[current] = max((layer[p] + 1 for p in preds[current] if p in layer), default=0)
        for nxt in succs[current]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0 and nxt not in done:
                ready.append(nxt)
    # Pull sources (inputs, weights) down next to their first consumer instead of layer 0.
    for element in elements:
        name = element.id
        if not preds[name] and succs[name]:
            layer[name] = max(0, min(layer[s] for s in succs[name]) - 1)
    return layer


def _cluster_spans(
    elements: list[_Element], layer: Mapping[str, int], clusters: Mapping[str, _Cluster]
) -> list[tuple[int, int]]:
    """The first and last layer of each top-level cluster (a body must not straddle two columns)."""
    spans: dict[str, list[int]] = {}
    for element in elements:
        cluster = element.cluster
        while cluster and cluster in clusters and clusters[cluster].parent:
            cluster = clusters[cluster].parent
        if cluster:
            span = spans.setdefault(cluster, [layer[element.id], layer[element.id]])
            span[0] = min(span[0], layer[element.id])
            span[1] = max(span[1], layer[element.id])
    return [(a, b) for a, b in spans.values()]


def _fold(n_layers: int, per_column: int, spans: list[tuple[int, int]]) -> list[list[int]]:
    """Split layers into columns of about `per_column`, never inside a cluster's span."""
    inside = [False] * (n_layers + 1)  # inside[k]: a break before layer k would split a cluster
    for first, last in spans:
        for k in range(first + 1, last + 1):
            inside[k] = True
    columns: list[list[int]] = []
    start = 0
    while start < n_layers:
        end = min(start + per_column, n_layers)
        while end < n_layers and inside[end]:
            end += 1
        columns.append(list(range(start, end)))
        start = end
    return columns


def _layered_text(
    elements: list[_Element],
    edges: list[_Edge],
    clusters: Mapping[str, _Cluster],
    options: DrawOptions,
    title: str,
) -> tuple[str, tuple[float, float]]:
    """DOT text with positions for `neato -n2`, written directly (pydot objects cost seconds)."""
    layer = _layers(elements, edges)
    by_layer: dict[int, list[_Element]] = defaultdict(list)
    for element in elements:
        by_layer[layer[element.id]].append(element)
    n_layers = max(by_layer) + 1 if by_layer else 1
    preds: dict[str, list[str]] = defaultdict(list)
    for edge in edges:
        preds[edge.dst].append(edge.src)
    # Within a layer: barycentre of the predecessors' slots, then cluster, then model order.
    slot: dict[str, float] = {}
    for level in range(n_layers):
        row = by_layer.get(level, [])

        def key(e: _Element) -> tuple[float, str, int]:
            known = [slot[p] for p in preds[e.id] if p in slot]
            return (sum(known) / len(known) if known else float(e.order), e.cluster or "", e.order)

        row.sort(key=key)
        for k, element in enumerate(row):
            slot[element.id] = float(k)
        by_layer[level] = row
    # "Across" is the direction within a layer, "along" the direction of the flow.
    lr = options.rankdir == "LR"

    def across_size(e: _Element) -> float:
        return e.height if lr else e.width

    def along_size(e: _Element) -> float:
        return e.width if lr else e.height

    gap_across, gap_along = (0.2, 0.6) if lr else (_X_GAP, _Y_GAP)
    span = {
        lv: sum(across_size(e) for e in row) + gap_across * max(len(row) - 1, 0)
        for lv, row in by_layer.items()
    }
    depth = {lv: max(along_size(e) for e in row) for lv, row in by_layer.items()}
    spans = _cluster_spans(elements, layer, clusters)

    def extent(per_band: int) -> tuple[list[list[int]], float, float]:
        """The bands for `per_band` layers each, and the picture's width and height (inches)."""
        folded = _fold(n_layers, per_band, spans)
        across = sum(max((span.get(lv, 0.0) for lv in b), default=0.0) + 1.2 for b in folded)
        along = max(sum(depth.get(lv, 0.4) + gap_along for lv in b) for b in folded)
        return folded, (along if lr else across), (across if lr else along)

    # Fold a long chain into bands so that the picture is about 16:10, not a 20,000-layer strip.
    low, high = 8, max(8, n_layers)
    while low < high:
        middle = (low + high) // 2
        _, width, height = extent(middle)
        # TB: longer bands make the picture narrower; LR: wider. Seek the first at 16:10.
        if (width / height > 1.6) if not lr else (width / height < 1.6):
            low = middle + 1
        else:
            high = middle
    bands, _, _ = extent(low)
    pos: dict[str, tuple[float, float]] = {}  # (across, along) centre, inches
    across_total = 0.0
    along_total = 0.0
    for band in bands:
        band_span = max((span.get(lv, 0.0) for lv in band), default=0.0)
        along = 0.0
        for lv in band:
            row = by_layer.get(lv, [])
            start = across_total + (band_span - span.get(lv, 0.0)) / 2
            row_depth = depth.get(lv, 0.4)
            for element in row:
                pos[element.id] = (start + across_size(element) / 2, along + row_depth / 2)
                start += across_size(element) + gap_across
            along += row_depth + gap_along
        along_total = max(along_total, along)
        across_total += band_span + 1.2  # gap between bands
    lines = ["digraph onnx {"]
    graph_attrs = _graph_defaults(options, title)
    graph_attrs.pop("rankdir")
    graph_attrs.update(splines="false", outputorder="edgesfirst", overlap="true")
    lines.append("graph [" + " ".join(f"{k}={v}" for k, v in graph_attrs.items()) + "];")
    lines.append(
        "node [" + " ".join(f"{k}={v}" for k, v in _NODE_DEFAULTS.items()) + " fixedsize=true];"
    )
    lines.append("edge [" + " ".join(f"{k}={v}" for k, v in _EDGE_DEFAULTS.items()) + "];")
    points = 72.0

    def xy(element_id: str) -> tuple[float, float]:
        a, b = pos[element_id]
        if lr:
            return b * points, (across_total - a) * points
        return a * points, (along_total - b) * points  # Graphviz's y axis points up

    members: dict[str, list[_Element]] = defaultdict(list)
    for element in elements:
        owner = element.cluster
        while owner:
            members[owner].append(element)
            owner = clusters[owner].parent if owner in clusters else None
    for cid, cluster in clusters.items():
        inside = members.get(cid)
        if not inside:
            continue
        xs, ys = [], []
        for element in inside:
            x, y = xy(element.id)
            w, h = element.width * points / 2, element.height * points / 2
            xs += [x - w, x + w]
            ys += [y - h, y + h]
        pad = 8.0
        bb = f"{min(xs) - pad:.1f},{min(ys) - pad:.1f},{max(xs) + pad:.1f},{max(ys) + pad + 12:.1f}"
        lines.append(
            f'subgraph {cid} {{ graph [bb="{bb}" label={dot_quote(cluster.label, limit=80)} '
            'style="rounded,dashed" color="#7a7a7a" fontsize=10]; }'
        )
    for element in elements:
        x, y = xy(element.id)
        w, h = element.width, element.height
        attrs = " ".join(f"{k}={v}" for k, v in element.attrs.items())
        lines.append(f'{element.id} [{attrs} width={w:.2f} height={h:.2f} pos="{x:.1f},{y:.1f}"];')
    for edge in edges:
        attrs = " ".join(f"{k}={v}" for k, v in edge.attrs.items())
        lines.append(f"{edge.src} -> {edge.dst}" + (f" [{attrs}];" if attrs else ";"))
    lines.append("}")
    size = (along_total, across_total) if lr else (across_total, along_total)
    return "\n".join(lines) + "\n", size
