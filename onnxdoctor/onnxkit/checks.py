"""The CHECK stage: ONNX checker, strict shape inference and our structural checks, as Findings.

`onnx.checker.check_model` stops at the first error and, for a node inside an If/Loop/Scan body,
names only the outermost node. To put every failing node on the picture we also check each node on
its own (`onnx.checker.check_node`, with subgraphs emptied so that their outer-scope names do not
look undefined), parse every node named in shape inference's aggregated error, and run cheap
structural checks (SSA, order, cycles, undefined names, opset imports, ATen nodes) in Python.
Nothing here raises for a bad model.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from onnxdoctor.model import Finding, Severity, Stage
from onnxdoctor.onnxkit.files import safe_text
from onnxdoctor.onnxkit.walk import NodePath, node_bodies, nodes_on_cycles, op_label, walk_nodes

if TYPE_CHECKING:
    import onnx

__all__ = ["LocatedFinding", "check_model", "check_model_located"]

ATEN_DOMAIN = "org.pytorch.aten"

_CHECKER_CONTEXT = re.compile(r"==> Context: Bad node spec for node\. Name: (.*?) OpType: (\S+)")
_SCHEMA_NODE = re.compile(r"^Node\((.*?)\) with schema")
_NO_OP = re.compile(r"No Op registered for (\S+) with domain_version of (\d+)")
_NO_OPSET = re.compile(r"No opset import for domain '?([^'\s]*)'?")
_SHAPE_NODE = re.compile(r"\(op_type:([^,)]*)(?:, node name: (.*?))?\): ")
_TOPO = re.compile(r"input '(.*?)' of node: \s*name: (.*?) OpType: (\S+)")
_SSA = re.compile(r"however '(.*?)' has been used as output names multiple times")


@dataclass(frozen=True)
class LocatedFinding:
    """A finding plus the exact node it is about, when known (names alone can be ambiguous)."""

    finding: Finding
    path: NodePath | None


def check_model(
    model: onnx.ModelProto, *, model_dir: str | None = None, max_per_kind: int | None = 5,
    on_step: Callable[[str], None] | None = None,
) -> list[Finding]:
    """Check a model the way the CHECK stage does, and say what is wrong with which node.

    Runs `onnx.checker.check_model` and strict shape inference (together what
    `check_model(full_check=True)` does, run separately so that a checker error does not hide a
    shape error), a per-node schema check, and our own structural checks.

    Args:
        model: the model, normally from `onnxdoctor.onnxkit.files.read_onnx`.
        model_dir: the model's folder; stripped from messages so they hold no absolute paths.
        max_per_kind: keep at most this many findings with the same code and op (the last kept one
            says how many more nodes share the problem); None keeps them all.
        on_step: told each step's name before it runs (the worker records it, so that a crash in
            native code names the step).

    Returns:
        Findings with stage CHECK, errors first in model order; empty when the model is valid.
    """
    return [
        lf.finding
        for lf in check_model_located(model, model_dir=model_dir, max_per_kind=max_per_kind, on_step=on_step)
    ]


def check_model_located(
    model: onnx.ModelProto, *, model_dir: str | None = None, max_per_kind: int | None = None,
    on_step: Callable[[str], None] | None = None,
) -> list[LocatedFinding]:
    """Like `check_model`, with each finding's node path (for drawing). Keeps all by default."""
    try:
        return _limit(_Checker(model, model_dir, on_step).run(), max_per_kind)
    except RecursionError:
        finding = Finding(
            code="OD306",
            stage=Stage.CHECK,
            severity=Severity.ERROR,
            message="subgraphs are nested too deeply to check",
        )
        return [LocatedFinding(finding, None)]


class _Checker:
    """One check run over one model; collects located findings."""

    def __init__(self, model: onnx.ModelProto, model_dir: str | None,
                 on_step: Callable[[str], None] | None = None) -> None:
        self.step = on_step or (lambda _name: None)
        self.model = model
        self.model_dir = model_dir
        self.opsets: dict[str, int] = {}
        for opset in model.opset_import:
            domain = safe_text(opset.domain)
            self.opsets["" if domain == "ai.onnx" else domain] = int(opset.version)
        self.nodes: list[tuple[NodePath, onnx.NodeProto]] = list(walk_nodes(model.graph))
        self.by_name: dict[str, list[NodePath]] = defaultdict(list)
        self.node_at: dict[NodePath, onnx.NodeProto] = {}
        for path, node in self.nodes:
            self.by_name[safe_text(node.name)].append(path)
            self.node_at[path] = node
        self.found: list[LocatedFinding] = []

    # -- driver -----------------------------------------------------------------------------

    def run(self) -> list[LocatedFinding]:
        self.step("the graph's structure")
        self._structure(self.model.graph, (), outer=frozenset())
        self._opset_imports()
        self._aten_nodes()
        self.step("the onnx checker")
        checker_error = self._onnx_checker()
        if checker_error is not None:
            # The checker reports one error; check each node alone to find every failing node.
            self.step("the onnx checker, node by node")
            self._each_node()
            self._add_checker_error(checker_error)
        self.step("shape inference (with data propagation)")
        self._shape_inference()
        errors = [lf for lf in self.found if lf.finding.severity is Severity.ERROR]
        others = [lf for lf in self.found if lf.finding.severity is not Severity.ERROR]
        return errors + others

    # -- helpers ----------------------------------------------------------------------------

    def _clean(self, text: str) -> str:
        """One line, no absolute model folder, no trailing blank context."""
        if self.model_dir:
            base = os.path.abspath(self.model_dir).rstrip(os.sep)
            text = text.replace(base + os.sep, "").replace(base, ".")
        text = text.replace("\n\n==> Context: ", " | context: ")
        return " ".join(text.split())

    def _add(
        self,
        code: str,
        message: str,
        path: NodePath | None,
        evidence: str = "",
        severity: Severity = Severity.ERROR,
        op: str | None = None,
    ) -> None:
        node = self.node_at.get(path) if path is not None else None
        name = safe_text(node.name) if node is not None else None
        if node is not None and op is None:
            op = op_label(node)
        opset = None
        if node is not None:
            domain = safe_text(node.domain)
            opset = self.opsets.get("" if domain == "ai.onnx" else domain)
        finding = Finding(
            code=code,
            stage=Stage.CHECK,
            severity=severity,
            message=message,
            op=op,
            node=name or None,
            opset=opset,
            evidence=(self._clean(evidence),) if evidence else (),
        )
        self.found.append(LocatedFinding(finding, path))

    def _has(self, code: str, path: NodePath | None) -> bool:
        return any(lf.finding.code == code and lf.path == path for lf in self.found)

    def _describe(self, path: NodePath) -> str:
        node = self.node_at[path]
        name = safe_text(node.name)
        where = f"node {name!r}" if name else f"an unnamed node (#{_path_text(path)})"
        return f"{where} ({op_label(node)})"

    def _resolve(self, name: str | None, op_type: str | None) -> NodePath | None:
        """Find the node a library message names; by op type when the name is empty or unknown."""
        if name:
            paths = self.by_name.get(name)
            if paths:
                if op_type:
                    for path in paths:
                        if safe_text(self.node_at[path].op_type) == op_type:
                            return path
                return paths[0]
        if op_type:
            for path, node in self.nodes:
                if safe_text(node.op_type) == op_type and (not name or not safe_text(node.name)):
                    return path
        return None

    # -- our own structural checks ----------------------------------------------------------

    def _structure(self, graph: onnx.GraphProto, prefix: NodePath, outer: frozenset[str]) -> None:
        """SSA, order, cycles and undefined names in one graph, then in its subgraphs."""
        defined: set[str] = set(outer)
        defined.update(safe_text(v.name) for v in graph.input)
        defined.update(safe_text(t.name) for t in graph.initializer)
        defined.update(safe_text(t.values.name) for t in graph.sparse_initializer)
        producer: dict[str, int] = {}
        for index, node in enumerate(graph.node):
            for out in node.output:
                out = safe_text(out)
                if not out:
                    continue
                if out in producer:
                    first = self._describe((*prefix, producer[out]))
                    self._add(
                        "OD306",
                        f"tensor {out!r} is produced twice: by {first} and by "
                        f"{self._describe((*prefix, index))} (the graph must be in SSA form)",
                        (*prefix, index),
                    )
                else:
                    producer[out] = index
        late: dict[int, list[tuple[str, int]]] = defaultdict(list)
        seen = set(defined)
        for index, node in enumerate(graph.node):
            for name in node.input:
                name = safe_text(name)
                if not name or name in seen:
                    continue
                if name in producer:
                    late[index].append((name, producer[name]))
                else:
                    self._add(
                        "OD306",
                        f"input {name!r} of {self._describe((*prefix, index))} is not a graph "
                        "input, an initializer or any node's output",
                        (*prefix, index),
                    )
            seen.update(safe_text(o) for o in node.output if o)
        if late:
            self._order_and_cycles(graph, prefix, late, producer)
        for out in graph.output:
            name = safe_text(out.name)
            if name and name not in producer and name not in defined:
                self._add("OD306", f"graph output {name!r} is not produced by any node", None)
        scope = frozenset(defined | set(producer))
        for index, node in enumerate(graph.node):
            for name, body in node_bodies(node):
                self._structure(body, (*prefix, index, name), scope)

    def _order_and_cycles(
        self,
        graph: onnx.GraphProto,
        prefix: NodePath,
        late: dict[int, list[tuple[str, int]]],
        producer: dict[str, int],
    ) -> None:
        """Inputs produced only later are either a cycle or merely an unsorted graph."""
        cyclic = nodes_on_cycles(graph, producer)
        reported_cycles: set[frozenset[int]] = set()
        for index, pairs in late.items():
            for name, source in pairs:
                component = cyclic.get(index)
                if component is not None and component == cyclic.get(source):
                    if component in reported_cycles:
                        continue
                    reported_cycles.add(component)
                    members = ", ".join(self._describe((*prefix, i)) for i in sorted(component)[:6])
                    more = f" and {len(component) - 6} more" if len(component) > 6 else ""
                    self._add(
                        "OD306",
                        f"nodes form a cycle through tensor {name!r}: {members}{more}",
                        (*prefix, index),
                    )
                else:
                    self._add(
                        "OD306",
                        f"{self._describe((*prefix, index))} reads {name!r} before "
                        f"{self._describe((*prefix, source))} produces it "
                        "(nodes must be topologically sorted)",
                        (*prefix, index),
                    )

    def _opset_imports(self) -> None:
        if not self.model.opset_import and self.model.ir_version >= 3:
            # One model-level finding, not one per node: nothing is imported at all.
            self._add(
                "OD399",
                "the model has no opset_import at all; it must import the default ONNX domain "
                "(opset_import: ai.onnx and the version it was built for)",
                None,
                evidence="model with IR version >= 3 must specify opset_import for ONNX",
            )
            return
        self._opset_versions()
        missing: dict[str, NodePath] = {}
        local_functions = {(safe_text(f.domain), safe_text(f.name)) for f in self.model.functions}
        for path, node in self.nodes:
            domain = safe_text(node.domain)
            domain = "" if domain == "ai.onnx" else domain
            if domain in self.opsets:
                continue
            if (domain, safe_text(node.op_type)) in local_functions and domain in self.opsets:
                continue
            missing.setdefault(domain, path)
        for domain, path in missing.items():
            shown = f"domain {domain!r}" if domain else "the default ONNX domain"
            count = sum(
                1
                for _, n in self.nodes
                if ("" if safe_text(n.domain) == "ai.onnx" else safe_text(n.domain)) == domain
            )
            self._add(
                "OD302",
                f"{self._describe(path)} uses {shown}, which the model does not import "
                f"({count} node{'s' if count != 1 else ''}); add it to opset_import",
                path,
            )

    def _opset_versions(self) -> None:
        """The checker accepts opsets newer than onnx knows; runtimes built with it refuse them."""
        import onnx

        known = onnx.defs.onnx_opset_version()
        version = self.opsets.get("")
        if version is not None and version > known:
            self._add(
                "OD399",
                f"the model imports default-domain opset {version}, newer than the newest "
                f"this onnx knows ({known}); runtimes will refuse it",
                None,
                severity=Severity.WARNING,
            )

    def _aten_nodes(self) -> None:
        for path, node in self.nodes:
            if safe_text(node.domain) == ATEN_DOMAIN or safe_text(node.op_type) == "ATen":
                operator = next(
                    (safe_text(a.s) for a in node.attribute if safe_text(a.name) == "operator"), ""
                )
                what = f" (aten::{operator})" if operator else ""
                self._add(
                    "OD305",
                    f"{self._describe(path)} is an ATen fallback node{what}; ONNX Runtime and most "
                    "other runtimes have no kernel for it",
                    path,
                    severity=Severity.WARNING,
                )

    # -- the onnx checker -------------------------------------------------------------------

    def _onnx_checker(self) -> str | None:
        import onnx

        try:
            onnx.checker.check_model(_without_external_data(self.model), full_check=False)
        except onnx.checker.ValidationError as exc:
            return str(exc)
        except ValueError as exc:  # a model over 2 GiB cannot be checked from memory
            return str(exc)
        except MemoryError:
            raise MemoryError("in the onnx checker") from None
        except Exception as exc:  # noqa: BLE001 - a checker failure is reported, never raised
            return f"{type(exc).__name__}: {exc}"
        return None

    def _each_node(self) -> None:
        """check_node on every node, subgraphs emptied (their scope is checked structurally)."""
        import onnx

        ctx = onnx.checker.C.CheckerContext()
        ctx.ir_version = int(self.model.ir_version)
        ctx.opset_imports = dict(self.opsets)
        for path, node in self.nodes:
            probe = node
            if any(a.HasField("g") or len(a.graphs) for a in node.attribute):
                probe = onnx.NodeProto()
                probe.CopyFrom(node)
                for attr in probe.attribute:
                    if attr.HasField("g"):
                        attr.g.CopyFrom(onnx.GraphProto(name=attr.g.name))
                    for sub in attr.graphs:
                        sub.CopyFrom(onnx.GraphProto(name=sub.name))
            try:
                onnx.checker.check_node(probe, ctx)
            except onnx.checker.ValidationError as exc:
                self._node_error(str(exc), path)
            except MemoryError:
                raise MemoryError(f"in the onnx checker, on {_node_words(node)}") from None
            except Exception as exc:  # noqa: BLE001 - a checker bug must not stop the check
                self._node_error(f"{type(exc).__name__}: {exc}", path)

    def _node_error(self, text: str, path: NodePath) -> None:
        node = self.node_at[path]
        first = text.strip().splitlines()[0] if text.strip() else text
        code = _classify_checker_text(first)
        if code == "OD302" and (self._has("OD302", path) or not self.model.opset_import):
            return  # already reported, or covered by the one "no opset_import at all" finding
        if code == "OD302" and any(lf.finding.code == "OD302" for lf in self.found):
            # One OD302 per missing domain is already there (structural); mark the node anyway.
            domain = safe_text(node.domain)
            self._add(
                "OD302",
                f"{self._describe(path)} uses domain {domain!r}, which the model does not import",
                path,
                evidence=text,
            )
            return
        self._add(code, self._node_message(code, first, path), path, evidence=text)

    def _node_message(self, code: str, first: str, path: NodePath) -> str:
        node = self.node_at[path]
        where = self._describe(path)
        if code == "OD301":
            match = _NO_OP.search(first)
            version = int(match.group(2)) if match else self.opsets.get(safe_text(node.domain), 0)
            since = _since_version(safe_text(node.op_type), safe_text(node.domain))
            exists = f"; it exists from opset {since}" if since and since > version else ""
            if since is None:
                exists = "; no ONNX opset defines it"
            return f"{where}: {safe_text(node.op_type)} is not in opset {version}{exists}"
        if code == "OD302":
            return (
                f"{where} uses domain {safe_text(node.domain)!r}, which the model does not import"
            )
        return f"{where} violates its schema: {first}"

    def _add_checker_error(self, text: str) -> None:
        """The whole-model checker error, unless a more precise finding already covers it."""
        first = text.strip().splitlines()[0] if text.strip() else text
        code = _classify_checker_text(text)
        path: NodePath | None = None
        context = _CHECKER_CONTEXT.findall(text)
        if context:
            name, op_type = context[-1]
            path = self._resolve(name, op_type)
        elif (match := _SCHEMA_NODE.search(first)) is not None:
            path = self._resolve(match.group(1), None)
        elif (match := _TOPO.search(text)) is not None:
            path = self._resolve(match.group(2), match.group(3))
        if code == "OD306" and any(lf.finding.code == "OD306" for lf in self.found):
            return
        if code == "OD302" and (
            any(lf.finding.code == "OD302" for lf in self.found) or not self.model.opset_import
        ):
            return
        if any(
            lf.finding.evidence and lf.finding.evidence[0].startswith(self._clean(first))
            for lf in self.found
        ):
            return  # the per-node check already located this error (maybe deeper in a subgraph)
        if "is higher than the checker's" in first:
            # The onnx library is older than the model: the checker cannot judge it, so this is
            # a warning; only a runtime load can tell whether it is usable (OD403).
            self._add(
                "OD399",
                f"the model's IR version {self.model.ir_version} is newer than this onnx checks "
                f"({self._clean(first)}); a runtime load decides (--runtime, diagnose)",
                None,
                evidence=text,
                severity=Severity.WARNING,
            )
            return
        if code == "OD306":
            message = f"the ONNX checker rejects the graph structure: {self._clean(first)}"
        elif "Field 'shape' of 'type' is required" in first:
            message = self._shapeless_io_message(first)
        elif path is not None and code in ("OD301", "OD302", "OD303"):
            message = self._node_message(code, first, path)
        else:
            message = f"the ONNX checker rejects the model: {self._clean(first)}"
        self._add(code, message, path, evidence=text)

    def _shapeless_io_message(self, first: str) -> str:
        """Name the graph inputs/outputs whose tensor type lacks a shape (the checker does not)."""
        names = [
            safe_text(vi.name)
            for vi in (*self.model.graph.input, *self.model.graph.output)
            if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape")
        ]
        which = f" ({', '.join(repr(n) for n in names[:5])})" if names else ""
        return (
            f"the ONNX checker rejects the model: a graph input or output{which} has a tensor type "
            f"without a shape field: {self._clean(first)}"
        )

    # -- shape inference --------------------------------------------------------------------

    def _shape_inference(self) -> None:
        import onnx

        try:
            onnx.shape_inference.infer_shapes(
                self.model, check_type=True, strict_mode=True, data_prop=True
            )
        except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
            if _EXTERNAL_VALUES.search(str(exc)):
                # Data propagation wanted the values of a tensor kept in an external file, which
                # the check does not read (the exporter writes big constants beside the model):
                # not a fault of the model. Inference without propagation still checks it.
                plain = _plain_inference_error(self.model)
                if plain and not _EXTERNAL_VALUES.search(plain):
                    self._shape_errors(plain)
                return
            # onnx.checker's full check infers without data propagation; where that fails too, its
            # error comes first (a declared shape that contradicts inference, before the node
            # downstream that the propagated values then break).
            with contextlib.suppress(Exception):
                plain = _plain_inference_error(self.model)
                if plain and plain != str(exc):
                    self._shape_errors(plain)
            self._shape_errors(str(exc))
        except MemoryError:
            # Not a finding about the model's shapes: the stage ran out of memory (OD905), which
            # the worker reports with its cap. A node's extreme constants (a Slice's 2**62 bounds)
            # make inference with data propagation allocate without bound.
            suspect = self._extreme_constants()
            near = f", near {_node_words(suspect)}, whose constant inputs reach the int64 limits" if suspect else ""
            error = CheckOutOfMemory(f"in shape inference (with data propagation){near}")
            if suspect is not None:
                error.node, error.op = safe_text(suspect.name) or None, safe_text(suspect.op_type)
            raise error from None
        except Exception as exc:  # noqa: BLE001 - e.g. a model too large to serialize
            self._add(
                "OD304", f"shape inference failed: {self._clean(str(exc))}", None, evidence=str(exc)
            )

    def _mixed_types(self) -> tuple[onnx.NodeProto, list[str]] | None:
        """The first standard node whose inputs bound to one type parameter have different element
        types, from the types the graph declares (initializers, inputs, value_info), with them."""
        from onnx import TensorProto

        from onnxdoctor.onnxkit.transforms import domain_versions, type_groups

        graph = self.model.graph
        types = {i.name: i.data_type for i in graph.initializer}
        for value in [*graph.input, *graph.value_info, *graph.output]:
            if value.type.HasField("tensor_type") and value.type.tensor_type.elem_type:
                types.setdefault(value.name, value.type.tensor_type.elem_type)
        versions = domain_versions(self.model)
        for node in graph.node:
            for group in type_groups(node, versions, named=False):
                held = sorted({types[name] for _, name in group if name in types})
                if len(held) > 1:
                    return node, [TensorProto.DataType.Name(t).lower() for t in held]
        return None

    def _extreme_constants(self) -> onnx.NodeProto | None:
        """The first node fed a small integer constant near the int64 limits (|v| >= 2**40): the
        likely reason shape inference with data propagation ran out of memory."""
        from onnx import TensorProto, numpy_helper

        small = {}
        tensors = [*self.model.graph.initializer,
                   *(a.t for n in self.model.graph.node if n.op_type == "Constant" for a in n.attribute if a.HasField("t"))]
        outputs = {id(a.t): n.output[0] for n in self.model.graph.node if n.op_type == "Constant"
                   for a in n.attribute if a.HasField("t") and n.output}
        for tensor in tensors:
            if (tensor.data_type in (TensorProto.INT64, TensorProto.INT32) and tensor.data_location != TensorProto.EXTERNAL
                    and len(tensor.dims) <= 1 and all(d <= 64 for d in tensor.dims)):
                try:
                    values = numpy_helper.to_array(tensor).reshape(-1).tolist()
                except ValueError:
                    continue
                if any(abs(int(v)) >= 2**40 for v in values):
                    small[outputs.get(id(tensor), safe_text(tensor.name))] = True
        return next((n for n in self.model.graph.node if any(safe_text(i) in small for i in n.input)), None)

    def _shape_errors(self, text: str) -> None:
        lines = [line for line in text.splitlines() if line.strip()]
        first = len(self.found)
        lost: list[str] = []  # nodes whose input lost its type to an earlier error of this run
        for line in lines or [text]:
            matches = list(_SHAPE_NODE.finditer(line))
            path: NodePath | None = None
            op_type = None
            if matches:
                last = matches[-1]
                op_type, name = last.group(1), last.group(2)
                path = self._resolve(name or "", op_type)
                detail = line[last.end() :]
            else:
                detail = line
            detail = re.sub(r"^\[(?:Shape|Type)InferenceError\]\s*", "", detail.strip())
            detail = re.sub(r"^Inference error\(s\):\s*", "", detail)
            if path is None and _TYPE_DIFFERS.search(detail):
                # Inference names no node for a type it cannot reconcile: the node whose inputs
                # of one type parameter hold two types (a complex64 initializer beside floats
                # in a Concat, pytorch#170054) is where the types meet.
                mixed = self._mixed_types()
                if mixed is not None:
                    node, held = mixed
                    op_type, name = safe_text(node.op_type), safe_text(node.name)
                    path = self._resolve(name, op_type)
                    detail += f" ({op_type}'s inputs of one type parameter hold {' and '.join(held)})"
            if "No opset import for domain" in detail:
                if not self.model.opset_import or any(
                    lf.finding.code == "OD302" for lf in self.found
                ):
                    continue
                code = "OD302"
            else:
                code = "OD304"
            if path is not None and any(
                lf.path == path and lf.finding.severity is Severity.ERROR for lf in self.found
            ):
                continue  # a node-spec error on the same node explains this one
            if (
                path is None
                and detail
                and any(
                    lf.finding.code == code and self._clean(detail) in lf.finding.message
                    for lf in self.found
                )
            ):
                continue
            if (code == "OD304" and _LOST_TYPE.search(detail)
                    and any(lf.finding.code == "OD304" for lf in self.found[first:])):
                # Inference stopped at the earlier node; what it feeds has no type to check.
                lost.append(safe_text(name) if matches and name else (op_type or "?"))
                continue
            where = self._describe(path) if path is not None else (op_type or "the graph")
            self._add(
                code,
                f"shape inference failed at {where}: {self._clean(detail)}",
                path,
                evidence=line,
                op=op_type if path is None else None,
            )
        cause = next((i for i in range(first, len(self.found)) if self.found[i].finding.code == "OD304"), None)
        if lost and cause is not None:
            located = self.found[cause]
            shown = ", ".join(lost[:4]) + (f" and {len(lost) - 4} more" if len(lost) > 4 else "")
            message = (f"{located.finding.message}; {len(lost)} node{'s' if len(lost) > 1 else ''} after it lost "
                       f"{'their' if len(lost) > 1 else 'its'} input types with it ({shown})")
            self.found[cause] = LocatedFinding(replace(located.finding, message=message), located.path)


# Inference meeting a value whose element type differs from the one the graph declares for it.
_TYPE_DIFFERS = re.compile(r"Inferred elem type differs from existing elem type")

# Shape inference's words for a node whose input got no type because inference failed before it.
_LOST_TYPE = re.compile(r"Input \d+ expected to have type but instead is null")

# Shape inference asked for the values of a tensor whose data lives in an external file.
_EXTERNAL_VALUES = re.compile(r"Cannot parse data from external tensors")


def _plain_inference_error(model: onnx.ModelProto) -> str:
    """Strict shape inference's error without data propagation (onnx.checker's full check), or ""."""
    import onnx

    try:
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
        return str(exc)
    return ""


def _without_external_data(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose external tensors are empty, or the model itself when it has none.

    Given a ModelProto, the checker resolves external data against the current directory, not
    the model's folder: it would reject a correct model and stat files it should not. External
    data is vetted by `onnxdoctor.onnxkit.files` instead; the checker sees empty tensors (their
    shapes do not matter to it, and shape inference runs on the real model).
    """
    import onnx
    from onnx import TensorProto

    from onnxdoctor.onnxkit.files import iter_tensors

    if not any(t.data_location == TensorProto.EXTERNAL for t in iter_tensors(model)):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for tensor in iter_tensors(copy):
        if tensor.data_location == TensorProto.EXTERNAL:
            tensor.data_location = TensorProto.DEFAULT
            del tensor.external_data[:]
            del tensor.dims[:]
            tensor.dims.append(0)
    return copy


def _classify_checker_text(text: str) -> str:
    if _NO_OP.search(text):
        return "OD301"
    if _NO_OPSET.search(text) or "must specify opset_import" in text:
        return "OD302"
    if (
        "topologically sorted" in text
        or "single static assignment" in text
        or "used as output names multiple times" in text
    ):
        return "OD306"
    if "[ShapeInferenceError]" in text or "[TypeInferenceError]" in text:
        return "OD304"
    if "Bad node spec" in text or "with schema(" in text or "attribute" in text.lower():
        return "OD303"
    return "OD399"


def _since_version(op_type: str, domain: str) -> int | None:
    """The first opset of `domain` that defines `op_type`, from onnx's own schemas."""
    from onnxdoctor.onnxkit.transforms import first_opset

    return first_opset(op_type, domain)


def _path_text(path: NodePath) -> str:
    return "/".join(str(p) for p in path)


def _limit(found: list[LocatedFinding], max_per_kind: int | None) -> list[LocatedFinding]:
    """Keep `max_per_kind` findings per (code, op); the last kept one counts the rest."""
    if max_per_kind is None:
        return found
    totals = Counter((lf.finding.code, lf.finding.op) for lf in found)
    kept: list[LocatedFinding] = []
    seen: Counter[tuple[str, str | None]] = Counter()
    for lf in found:
        key = (lf.finding.code, lf.finding.op)
        seen[key] += 1
        if seen[key] > max_per_kind:
            continue
        if seen[key] == max_per_kind and totals[key] > max_per_kind:
            extra = totals[key] - max_per_kind
            note = f"and {extra} more node{'s' if extra != 1 else ''} with the same problem"
            lf = LocatedFinding(replace(lf.finding, evidence=(*lf.finding.evidence, note)), lf.path)
        kept.append(lf)
    return kept


class CheckOutOfMemory(MemoryError):
    """A check ran out of memory; `node` and `op` name the likely cause when one is found."""

    node: str | None = None
    op: str | None = None


def _node_words(node: Any) -> str:
    """`node 'name' (Op)` for a message (the name escaped: it comes from the model)."""
    return f"node {safe_text(node.name)!r} ({safe_text(node.op_type)})"
