"""`onnxdoctor sweep`: many models, each one `pipeline.diagnose`, on local runners or Ray tasks,
with a resumable results file, a report and a comparison of two sweeps (README, "sweep")."""
