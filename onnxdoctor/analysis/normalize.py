"""Normalize library error messages before they enter a finding or a report.

Messages from torch, onnx and ONNX Runtime carry absolute paths, memory addresses, `.cc:123`
source positions, ANSI colours and timestamps that change from run to run and machine to
machine. Stripping them makes findings stable (goldens, de-duplication) and keeps private
paths out of reports.
"""

from __future__ import annotations

import os
import re

# ONNX Runtime's run-time error names the node it was running: "running TopK node. Name:'/TopK'".
RUNNING_NODE = re.compile(r"running ([\w.]+) node\. Name:'([^']*)'")


def running_node(text: str) -> re.Match[str] | None:
    """The node ONNX Runtime was running when it failed: the innermost one named. A node inside
    an If or Loop body fails inside its parent's message ("running If node. Name:'/If' Status
    Message: ... running Squeeze node. Name:'/Squeeze' ..."): the parent only carried it."""
    found = None
    for found in RUNNING_NODE.finditer(text):
        pass
    return found

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")
_ORT_PREFIX = re.compile(r"\[ONNXRuntimeError\] : \d+ : \w+ : ")
# "…/reshape_helper.h:47 onnxruntime::ReshapeHelper::ReshapeHelper(const …&, bool) " before the words
_CC_FUNCTION = re.compile(r"(?<![\w./\\-])(?:[\w./\\-]+/)?[\w.-]+\.(?:cc|cpp|h|hpp|cu|c):\d+ [\w:~<>]+\((?:[^()]|\([^()]*\))*\)\s*")
_CC_POS = re.compile(r"(?<![\w./\\-])(?:[\w./\\-]+/)?([\w.-]+\.(?:cc|cpp|h|hpp|cu|c)):\d+(?::\d+)?")
_TIMESTAMP = re.compile(
    r"\b\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?\b"
)
_GLOG_PREFIX = re.compile(r"^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+ +\d+ ", re.MULTILINE)
_SITE_PACKAGES = re.compile(r"(?:/[^\s'\"<>:]*)?/(?:site|dist)-packages/")
_TMP_PATH = re.compile(r"/tmp/[^\s'\"<>:]*?/(?=[^/\s'\"<>:]+(?:[\s'\"<>:]|$))")
_WS = re.compile(r"[ \t]+")
_BLANK_LINES = re.compile(r"\n{3,}")


def normalize_message(text: str, *, base_dir: str | None = None, limit: int = 4000) -> str:
    """Return `text` without volatile or private details, trimmed to `limit` characters.

    Args:
        text: the raw message.
        base_dir: the user's model folder; paths inside it are shown relative to it.
        limit: the maximum length kept (a marker is appended when cut).
    """
    if len(text) > limit * 4:
        text = text[: limit * 4]  # the regexes below are not linear on pathological input
    text = _ANSI.sub("", text)
    text = _GLOG_PREFIX.sub("", text)
    if base_dir:
        base = os.path.abspath(base_dir).rstrip("/") + "/"
        text = text.replace(base, "")
    home = os.path.expanduser("~")
    if home and home != "/":
        text = text.replace(home + "/", "~/")
    text = _ORT_PREFIX.sub("", text)
    text = _CC_FUNCTION.sub("", text)
    text = _SITE_PACKAGES.sub("<site-packages>/", text)
    text = _TMP_PATH.sub("<tmp>/", text)
    text = _CC_POS.sub(r"\1", text)
    text = _ADDRESS.sub("0x…", text)
    text = _TIMESTAMP.sub("<time>", text)
    text = "\n".join(_WS.sub(" ", line).rstrip() for line in text.splitlines())
    text = _BLANK_LINES.sub("\n\n", text).strip()
    if len(text) > limit:
        text = text[:limit].rstrip() + " …[cut]"
    return text


def first_line(text: str, limit: int = 300) -> str:
    """The first non-empty line of a message, trimmed: what a one-line finding shows."""
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""
