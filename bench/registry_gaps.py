"""List aten ops the dynamo exporter cannot translate: no onnxscript function, no decomposition.

An overload is a gap when torch.onnx's registry (torchlib) has no function for it, torch's default
export decompositions have no entry for it, and it is not CompositeImplicitAutograd (those are
traced into other ops before the exporter sees them). In-place, `out=` and backward overloads are
left out: an inference export never meets them. Ops the op-rewrite library covers are marked.

The list is a starting point for choosing rewrites: each candidate must still be checked by a
real export with both exporters (some gaps are reached only through ops that do translate).

Usage: python bench/registry_gaps.py [--all]
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch.onnx._internal.exporter import _registration

from onnxdoctor.rewrites import REWRITES

SKIPPED_SUFFIXES = ("_backward", "_forward_only", "_jvp", "_copy")


def gaps() -> list[str]:
    """Qualified `aten::name.overload` strings the dynamo exporter has no route for."""
    registry = _registration.ONNXRegistry.from_torchlib()
    decompositions = torch.export.default_decompositions()
    found = []
    for name in sorted(dir(torch.ops.aten)):
        if name.startswith("_foreach") or name.endswith("_") or name.endswith(SKIPPED_SUFFIXES):
            continue
        packet = getattr(torch.ops.aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload_name in packet.overloads():
            if overload_name == "out" or overload_name.endswith("_out") or "out" in overload_name.split("_"):
                continue
            overload = getattr(packet, overload_name)
            if registry.is_registered(overload) or overload in decompositions:
                continue
            try:
                composite = torch._C._dispatch_has_kernel_for_dispatch_key(
                    overload.name(), "CompositeImplicitAutograd"
                )
            except RuntimeError:  # a TorchScript-only builtin with no dispatcher entry
                continue
            if composite:
                continue
            found.append(f"aten::{name}.{overload_name}")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    covered = {t.replace("aten.", "aten::", 1) for r in REWRITES for t in r.targets}
    listed = gaps()
    for entry in listed:
        print(f"{entry:55s}{'  covered by the op-rewrite library' if entry in covered else ''}")
    print(f"\n{len(listed)} aten overloads with no dynamo route; "
          f"{sum(e in covered for e in listed)} covered by the op-rewrite library", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
