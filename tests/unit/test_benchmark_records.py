"""docs/benchmarks holds records, not a diary: each benchmark folder's README states the
current figures, and the folder keeps only the run files those figures come from (and the
charts it shows). A file its README does not name is a leftover of a superseded run: git
keeps history, the folder does not."""

from __future__ import annotations

from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks"
# Past this, the folder is a diary again (546 files before it was cut down).
MOST_FILES = 150


def folders() -> list[Path]:
    return sorted(path for path in BENCHMARKS.iterdir() if path.is_dir())


def unnamed_files(folder: Path) -> list[str]:
    """The files under ``folder`` its README.md names neither by path (relative to the
    folder) nor by file name."""
    readme = (folder / "README.md").read_text()
    unnamed = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path == folder / "README.md":
            continue
        relative = str(path.relative_to(folder))
        if relative not in readme and path.name not in readme:
            unnamed.append(relative)
    return unnamed


@pytest.mark.parametrize("folder", folders(), ids=lambda folder: folder.name)
def test_a_benchmark_folder_holds_only_files_its_readme_names(folder: Path) -> None:
    assert (folder / "README.md").is_file(), f"{folder.name} has no README.md"
    assert unnamed_files(folder) == [], f"{folder.name}/README.md does not name these"


def test_docs_benchmarks_stays_small() -> None:
    files = [path for path in BENCHMARKS.rglob("*") if path.is_file()]
    assert len(files) < MOST_FILES, len(files)


def test_an_unnamed_file_is_found(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("Figures from `run_a.json` and ![chart](charts/a.svg).")
    (tmp_path / "charts").mkdir()
    for name in ("run_a.json", "run_b.json", "charts/a.svg", "charts/b.svg"):
        (tmp_path / name).write_text("{}")
    assert unnamed_files(tmp_path) == ["charts/b.svg", "run_b.json"]
