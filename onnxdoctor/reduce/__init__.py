"""`onnxdoctor reduce`: the smallest standalone model that fails the way the user's does (docs/reduce.md).

The parent side only (no torch, no onnxruntime): it starts the reduce worker
(worker/reduce.py, worker/reduce_script.py) with the isolation `diagnose` uses and installs what
that worker wrote through onnxdoctor.outputs.
"""
