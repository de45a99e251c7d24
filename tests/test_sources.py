"""Reading the user's line a finding names: only files inside the model's folder."""

from __future__ import annotations

from pathlib import Path

from onnxdoctor.analysis.sources import folder_file, source_lines, source_text, split_source


def test_a_source_line_and_the_lines_after_it_are_read_from_the_model_folder(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "layers.py").write_text("a = 1\nif x.any():\n    y = torch.cond(\n", "utf-8")
    assert source_lines("pkg/layers.py:2", tmp_path) == ["if x.any():"]
    assert source_lines("pkg/layers.py:2", tmp_path, count=5) == ["if x.any():", "    y = torch.cond("]
    assert source_text("pkg/layers.py:3", tmp_path) == ("a = 1\nif x.any():\n    y = torch.cond(\n", 3)
    assert source_lines("pkg/layers.py:9", tmp_path) == []  # past the end
    assert source_lines("pkg/layers.py:0", tmp_path) == []
    assert split_source("model.py") is None and split_source("C:/m.py:4") == ("C:/m.py", 4)


def test_a_source_outside_the_model_folder_is_never_read(tmp_path: Path) -> None:
    outside = tmp_path / "secret.py"
    outside.write_text("token = 'x'\n", "utf-8")
    model = tmp_path / "model"
    model.mkdir()
    assert folder_file(model, "../secret.py") is None
    assert folder_file(model, str(outside)) is None  # an absolute path elsewhere
    assert source_lines("../secret.py:1", model) == []
    (model / "link.py").symlink_to(outside)
    assert folder_file(model, "link.py") is None  # a link leading out of the folder
    assert folder_file(model, "missing.py") is None and folder_file(None, "model.py") is None
