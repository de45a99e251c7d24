#!/usr/bin/env bash
# Fetch ONNX Runtime's C/C++ headers into <repo>/.ort_headers (ignored by git) for the native kernels.
# The logic lives in the scaffold's copy (every generated package ships it); this only picks the folder.
# Prints the include directory (ORT_INCLUDE_DIR) on its last line; exit 1 when it cannot fetch them.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec bash "${repo_root}/onnxdoctor/scaffold/templates/static/fetch_ort_headers.sh" "${1:-${repo_root}/.ort_headers}"
