"""Reading and vetting ONNX files, the graph walker, checks and transforms (no torch)."""
