"""What a drawing is made of, shared by both layouts: options, quoted labels, boxes and edges.

`drawing` builds these from a model and lays small graphs out with Graphviz `dot`; `layered`
places big ones itself. Neither imports the other's internals: both import this module.
"""

from __future__ import annotations

from dataclasses import dataclass

# Ops drawn by default; beyond it the rest is cut with a note (see DrawOptions.max_nodes).
DEFAULT_MAX_NODES = 5000
# Above this many ops, `auto` lays a PNG out in columns (the layered layout): `dot` stacks a long
# model into one strip that a PNG's fixed pixels shrink past reading (350 ops: 92 x 10003 px).
PNG_DOT_OPS = 150
# Labels longer than this are cut in the picture; the tooltip (SVG) keeps the full text.
LABEL_CHARS = 48


@dataclass(frozen=True)
class DrawOptions:
    """What to draw and how.

    Attributes:
        tensors: draw each tensor as an ellipse (net_drawer style) instead of folding it into edges.
        initializers: draw initializers (weights); hidden by default.
        rankdir: "TB" (top to bottom) or "LR" (left to right).
        focus: a node or tensor name; draw only its neighbourhood.
        radius: how many ops away from the focus to draw.
        max_nodes: draw at most this many ops (0: no limit); the rest is cut with a note.
        layout: "auto", "dot" (Graphviz layout) or "layered" (ours, for big graphs).
        png: the picture is a PNG; `auto` folds one of more than PNG_DOT_OPS ops into columns.
    """

    tensors: bool = False
    initializers: bool = False
    rankdir: str = "TB"
    focus: str | None = None
    radius: int = 2
    max_nodes: int = DEFAULT_MAX_NODES
    layout: str = "auto"
    # The picture is a PNG: fixed pixels, so a long graph is folded into columns (see PNG_DOT_OPS).
    png: bool = False


def visible(text: str) -> str:
    """Control characters as visible escapes (`\\n`, `\\x01`): a name is shown, never obeyed."""
    out = []
    for ch in text:
        code = ord(ch)
        if code < 32 or code == 127 or 0x80 <= code < 0xA0 or ch in "\u2028\u2029":
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(ch, f"\\x{code:02x}"))
        else:
            out.append(ch)
    return "".join(out)


def _shorten(text: str, limit: int = LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def dot_quote(*lines: str, limit: int | None = LABEL_CHARS) -> str:
    """A DOT double-quoted string that Graphviz shows exactly as the given text.

    Each argument becomes one line. Inside a line: control characters become visible escapes,
    `&` becomes `&amp;` (Graphviz decodes HTML entities even in plain labels), backslashes are
    doubled (no `\\N`-style substitutions) and quotes escaped. The result is already quoted,
    so pydot passes it through unchanged.
    """
    parts = []
    for line in lines:
        text = visible(line)
        if limit is not None:
            text = _shorten(text, limit)
        text = text.replace("&", "&amp;").replace("\\", "\\\\").replace('"', '\\"')
        parts.append(text)
    return '"' + "\\n".join(parts) + '"'


@dataclass
class Element:
    """One Graphviz node: id, quoted attributes, cluster, and its box size for our layout."""

    id: str
    attrs: dict[str, str]
    cluster: str | None
    order: int
    width: float  # inches
    height: float


@dataclass
class Edge:
    """One Graphviz edge with its quoted attributes."""

    src: str
    dst: str
    attrs: dict[str, str]


def graph_defaults(options: DrawOptions, title: str) -> dict[str, str]:
    """The whole picture's Graphviz attributes: direction, font, title."""
    attrs = {
        "rankdir": options.rankdir,
        "fontname": "Helvetica",
        "fontsize": "12",
        "bgcolor": "white",
    }
    if title:
        attrs["label"] = dot_quote(title, limit=120)
        attrs["labelloc"] = "t"
    return attrs


NODE_DEFAULTS = {"fontname": "Helvetica", "fontsize": "10", "margin": '"0.08,0.03"'}
EDGE_DEFAULTS = {
    "fontname": "Helvetica",
    "fontsize": "8",
    "color": '"#555555"',
    "arrowsize": "0.6",
}


