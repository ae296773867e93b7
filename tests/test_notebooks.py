"""Every notebook in notebooks/ runs from top to bottom, and is stored without outputs.

Notebooks are executed the way a student runs them: a fresh "python3" kernel whose working
directory is notebooks/, one cell after another. A failing cell fails the test with its
index, its source and the error. New notebooks are picked up by the glob below.
"""

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 600
ANSI_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # IPython colours its tracebacks


def _read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def test_there_are_notebooks():
    # Without this, an empty glob would make the parametrized tests below vanish silently.
    assert NOTEBOOKS, f"no notebooks found in {NOTEBOOK_DIR}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_clean(path: Path):
    """Valid nbformat, the python3 kernel, and no outputs or execution counts in any cell."""
    nb = _read(path)
    nbformat.validate(nb)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3", (
        f"{path.name}: metadata.kernelspec.name should be 'python3', got {nb.metadata.get('kernelspec')}"
    )
    dirty = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count") is not None)
    ]
    assert not dirty, (
        f"{path.name}: cells {dirty} were stored with outputs or execution counts; "
        f"clear them (jupyter nbconvert --clear-output --inplace {path.name})"
    )


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path: Path):
    """Execute every cell in a fresh kernel started in notebooks/."""
    nb = _read(path)
    client = NotebookClient(
        nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK_DIR)}}
    )
    try:
        client.execute()
    except CellExecutionError as err:
        # The failing cell is the one that holds an error output (execution stops there).
        index = next(
            (
                i
                for i, cell in enumerate(nb.cells)
                if cell.cell_type == "code"
                and any(out.get("output_type") == "error" for out in cell.get("outputs", []))
            ),
            None,
        )
        source = nb.cells[index].source if index is not None else "(not found)"
        error = ANSI_COLOUR.sub("", str(err))
        pytest.fail(
            f"{path.name}: cell {index} failed\n--- source ---\n{source}\n--- error ---\n{error}", pytrace=False
        )
