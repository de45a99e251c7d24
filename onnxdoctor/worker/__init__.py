"""The worker: runs the pipeline in a fresh subprocess. The only package that imports torch/onnxruntime."""
