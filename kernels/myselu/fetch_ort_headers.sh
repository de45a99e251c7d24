#!/usr/bin/env bash
# Fetch ONNX Runtime's C/C++ headers (MIT) from Debian's libonnxruntime-dev without installing it.
#
# The onnxruntime wheel ships no headers, and bookworm has no libonnxruntime-dev, but trixie (1.21)
# and sid (1.23) do. We point apt at a private sources file and private state folders so the
# system's apt configuration and package database are never touched, `apt-get download` the .deb
# and unpack it with `dpkg-deb -x` into an ignored folder. A custom-op library built against these
# headers loads in pip's onnxruntime (newer runtimes serve all older API versions) and needs no
# link to libonnxruntime. Never vendor the headers into git.
#
# Usage: bash fetch_ort_headers.sh [DEST]   (DEST defaults to .ort_headers/ beside this script)
# Prints the include directory (the value for ORT_INCLUDE_DIR) on its last line of stdout.
# Exits 0 when the headers are there (already or now), 1 when they cannot be fetched.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="${1:-${here}/.ort_headers}"
mirror="${ORT_HEADERS_MIRROR:-http://deb.debian.org/debian}"
# sid first (newest headers), trixie as the fallback when sid's package is in flux.
suites="${ORT_HEADERS_SUITES:-sid trixie}"

find_include() {
    local header
    header="$(find "$1" -name onnxruntime_lite_custom_op.h -print -quit 2>/dev/null || true)"
    [ -n "${header}" ] && dirname "${header}"
}

if inc="$(find_include "${dest}")" && [ -n "${inc}" ]; then
    echo "${inc}"
    exit 0
fi

if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
    echo "fetch_ort_headers: apt-get and dpkg-deb are needed (Debian/Ubuntu); otherwise download an" \
         "ONNX Runtime release from https://github.com/microsoft/onnxruntime/releases and set" \
         "ORT_INCLUDE_DIR to its include/ folder" >&2
    exit 1
fi

keyring=/usr/share/keyrings/debian-archive-keyring.gpg
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
mkdir -p "${work}/lists/partial" "${work}/cache/archives/partial" "${work}/parts" "${work}/debs"
: > "${work}/status"

for suite in ${suites}; do
    if [ -r "${keyring}" ]; then
        echo "deb [signed-by=${keyring}] ${mirror} ${suite} main" > "${work}/sources.list"
    else
        echo "deb ${mirror} ${suite} main" > "${work}/sources.list"
    fi
    apt_opts=(
        -o "Dir::Etc::SourceList=${work}/sources.list"
        -o "Dir::Etc::SourceParts=${work}/parts"
        -o "Dir::State::Lists=${work}/lists"
        -o "Dir::State::status=${work}/status"
        -o "Dir::Cache=${work}/cache"
        -o "Debug::NoLocking=1"
        -o "APT::Sandbox::User=root"
        -q
    )
    echo "fetch_ort_headers: trying Debian ${suite}" >&2
    if ! apt-get "${apt_opts[@]}" update >&2; then
        continue
    fi
    if (cd "${work}/debs" && apt-get "${apt_opts[@]}" download libonnxruntime-dev >&2); then
        deb="$(ls "${work}"/debs/libonnxruntime-dev_*.deb 2>/dev/null | head -n1 || true)"
        if [ -n "${deb}" ]; then
            mkdir -p "${dest}"
            dpkg-deb -x "${deb}" "${dest}"
            basename "${deb}" > "${dest}/SOURCE_PACKAGE"
            if inc="$(find_include "${dest}")" && [ -n "${inc}" ]; then
                echo "fetch_ort_headers: unpacked $(basename "${deb}") into ${dest}" >&2
                echo "${inc}"
                exit 0
            fi
        fi
    fi
done

echo "fetch_ort_headers: could not fetch libonnxruntime-dev from ${mirror} (${suites});" \
     "set ORT_INCLUDE_DIR to an ONNX Runtime release's include/ folder instead" >&2
exit 1
