"""`graph`: drawing ONNX graphs with their findings (layout, Graphviz)."""
