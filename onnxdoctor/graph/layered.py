"""Our own layered layout for graphs too big for Graphviz's dot: positions for `neato -n2`."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping

from onnxdoctor.graph.collect import Cluster
from onnxdoctor.graph.elements import (
    EDGE_DEFAULTS,
    NODE_DEFAULTS,
    DrawOptions,
    Edge,
    Element,
    dot_quote,
    graph_defaults,
)

_X_GAP = 0.35  # inches between boxes in a layer


_Y_GAP = 0.45  # inches between layers


def _layers(elements: list[Element], edges: list[Edge]) -> dict[str, int]:
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
    elements: list[Element], layer: Mapping[str, int], clusters: Mapping[str, Cluster]
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


def layered_text(
    elements: list[Element],
    edges: list[Edge],
    clusters: Mapping[str, Cluster],
    options: DrawOptions,
    title: str,
) -> tuple[str, tuple[float, float], int]:
    """DOT text with positions for `neato -n2` (written directly: pydot objects cost seconds), the
    picture's size in inches, and how many columns (bands) the layers were folded into."""
    layer = _layers(elements, edges)
    by_layer = _ordered_rows(elements, edges, layer)
    placed = _Placement(elements, clusters, layer, by_layer, lr=options.rankdir == "LR")
    lines = ["digraph onnx {"]
    graph_attrs = graph_defaults(options, title)
    graph_attrs.pop("rankdir")
    graph_attrs.update(splines="false", outputorder="edgesfirst", overlap="true")
    lines.append("graph [" + " ".join(f"{k}={v}" for k, v in graph_attrs.items()) + "];")
    lines.append(
        "node [" + " ".join(f"{k}={v}" for k, v in NODE_DEFAULTS.items()) + " fixedsize=true];"
    )
    lines.append("edge [" + " ".join(f"{k}={v}" for k, v in EDGE_DEFAULTS.items()) + "];")
    lines += _cluster_lines(elements, clusters, placed)
    for element in elements:
        x, y = placed.xy(element.id)
        w, h = element.width, element.height
        attrs = " ".join(f"{k}={v}" for k, v in element.attrs.items())
        lines.append(f'{element.id} [{attrs} width={w:.2f} height={h:.2f} pos="{x:.1f},{y:.1f}"];')
    for edge in edges:
        edge_attrs = dict(edge.attrs)
        if placed.band.get(edge.src) != placed.band.get(edge.dst):
            # From one column to another the straight line crosses other boxes: drawn faint, it
            # says where the flow goes on without hiding the labels it passes over.
            edge_attrs.update(color='"#c4c4c4"', penwidth="0.6", arrowsize="0.4")
        attrs = " ".join(f"{k}={v}" for k, v in edge_attrs.items())
        lines.append(f"{edge.src} -> {edge.dst}" + (f" [{attrs}];" if attrs else ";"))
    lines.append("}")
    return "\n".join(lines) + "\n", placed.size, placed.bands


def _ordered_rows(
    elements: list[Element], edges: list[Edge], layer: dict[str, int]
) -> dict[int, list[Element]]:
    """Each layer's elements in order: barycentre of the predecessors' slots, cluster, model order."""
    by_layer: dict[int, list[Element]] = defaultdict(list)
    for element in elements:
        by_layer[layer[element.id]].append(element)
    n_layers = max(by_layer) + 1 if by_layer else 1
    preds: dict[str, list[str]] = defaultdict(list)
    for edge in edges:
        preds[edge.dst].append(edge.src)
    slot: dict[str, float] = {}
    for level in range(n_layers):
        row = by_layer.get(level, [])

        def key(e: Element) -> tuple[float, str, int]:
            known = [slot[p] for p in preds[e.id] if p in slot]
            return (sum(known) / len(known) if known else float(e.order), e.cluster or "", e.order)

        row.sort(key=key)
        for k, element in enumerate(row):
            slot[element.id] = float(k)
        by_layer[level] = row
    return by_layer


class _Placement:
    """Positions of the elements, a long chain folded into bands so the picture is about 16:10.

    "Across" is the direction within a layer, "along" the direction of the flow.
    """

    def __init__(
        self,
        elements: list[Element],
        clusters: Mapping[str, Cluster],
        layer: dict[str, int],
        by_layer: dict[int, list[Element]],
        *,
        lr: bool,
    ) -> None:
        self.lr = lr
        self.by_layer = by_layer
        self.n_layers = max(by_layer) + 1 if by_layer else 1
        self.gap_across, self.gap_along = (0.2, 0.6) if lr else (_X_GAP, _Y_GAP)
        self.span = {
            lv: sum(self.across_size(e) for e in row) + self.gap_across * max(len(row) - 1, 0)
            for lv, row in by_layer.items()
        }
        self.depth = {lv: max(self.along_size(e) for e in row) for lv, row in by_layer.items()}
        self.spans = _cluster_spans(elements, layer, clusters)
        self.pos: dict[str, tuple[float, float]] = {}  # (across, along) centre, inches
        self.band: dict[str, int] = {}  # the column each element is drawn in
        self.across_total = 0.0
        self.along_total = 0.0
        folded = self._bands()
        self.bands = len(folded)
        self._place(folded)

    def across_size(self, e: Element) -> float:
        return e.height if self.lr else e.width

    def along_size(self, e: Element) -> float:
        return e.width if self.lr else e.height

    def _extent(self, per_band: int) -> tuple[list[list[int]], float, float]:
        """The bands for `per_band` layers each, and the picture's width and height (inches)."""
        folded = _fold(self.n_layers, per_band, self.spans)
        across = sum(max((self.span.get(lv, 0.0) for lv in b), default=0.0) + 1.2 for b in folded)
        along = max(sum(self.depth.get(lv, 0.4) + self.gap_along for lv in b) for b in folded)
        return folded, (along if self.lr else across), (across if self.lr else along)

    def _bands(self) -> list[list[int]]:
        low, high = 8, max(8, self.n_layers)
        while low < high:
            middle = (low + high) // 2
            _, width, height = self._extent(middle)
            # TB: longer bands make the picture narrower; LR: wider. Seek the first at 16:10.
            if (width / height > 1.6) if not self.lr else (width / height < 1.6):
                low = middle + 1
            else:
                high = middle
        return self._extent(low)[0]

    def _place(self, bands: list[list[int]]) -> None:
        for number, band in enumerate(bands):
            band_span = max((self.span.get(lv, 0.0) for lv in band), default=0.0)
            along = 0.0
            for lv in band:
                start = self.across_total + (band_span - self.span.get(lv, 0.0)) / 2
                row_depth = self.depth.get(lv, 0.4)
                for element in self.by_layer.get(lv, []):
                    self.pos[element.id] = (start + self.across_size(element) / 2, along + row_depth / 2)
                    self.band[element.id] = number
                    start += self.across_size(element) + self.gap_across
                along += row_depth + self.gap_along
            self.along_total = max(self.along_total, along)
            self.across_total += band_span + 1.2  # gap between bands

    def xy(self, element_id: str) -> tuple[float, float]:
        """Graphviz points; its y axis points up."""
        a, b = self.pos[element_id]
        if self.lr:
            return b * _POINTS, (self.across_total - a) * _POINTS
        return a * _POINTS, (self.along_total - b) * _POINTS

    @property
    def size(self) -> tuple[float, float]:
        """Width and height in inches."""
        if self.lr:
            return (self.along_total, self.across_total)
        return (self.across_total, self.along_total)


_POINTS = 72.0


def _cluster_lines(
    elements: list[Element], clusters: Mapping[str, Cluster], placed: _Placement
) -> list[str]:
    """Each cluster as a box around its members (nested clusters count for their parents)."""
    members: dict[str, list[Element]] = defaultdict(list)
    for element in elements:
        owner = element.cluster
        while owner:
            members[owner].append(element)
            owner = clusters[owner].parent if owner in clusters else None
    lines = []
    for cid, cluster in clusters.items():
        inside = members.get(cid)
        if not inside:
            continue
        xs, ys = [], []
        for element in inside:
            x, y = placed.xy(element.id)
            w, h = element.width * _POINTS / 2, element.height * _POINTS / 2
            xs += [x - w, x + w]
            ys += [y - h, y + h]
        pad = 8.0
        bb = f"{min(xs) - pad:.1f},{min(ys) - pad:.1f},{max(xs) + pad:.1f},{max(ys) + pad + 12:.1f}"
        lines.append(
            f'subgraph {cid} {{ graph [bb="{bb}" label={dot_quote(cluster.label, limit=80)} '
            'style="rounded,dashed" color="#7a7a7a" fontsize=10]; }'
        )
    return lines
