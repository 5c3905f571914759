"""The notebooks in notebooks/ run top to bottom, and are committed without outputs.

Each notebook is executed with nbclient in a fresh ``python3`` kernel whose working
directory is ``notebooks/`` (the kernel inherits this process's environment, so the
compiled kernels go to the test session's temporary cache, see conftest.py).  A cell that
raises fails the test with that cell's source and traceback.  A few key outputs are
checked, found by the cell tags the notebooks carry (``metadata.tags``).
"""
import json
import pathlib
import re

import pytest

NOTEBOOKS = pathlib.Path(__file__).resolve().parent.parent / "notebooks"
NAMES = ["01_tour.ipynb", "02_schedules.ipynb", "03_onnx.ipynb"]
CELL_TIMEOUT = 300  # seconds per cell


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_stored_without_outputs(name):
    """Outputs are never committed: they are large, machine-specific and change at each
    run.  Clear them (Jupyter: Edit > Clear Outputs of All Cells) before committing.
    Plain JSON here, so that this runs without the Jupyter packages."""
    nb = json.loads((NOTEBOOKS / name).read_text(encoding="utf-8"))
    assert nb["nbformat"] == 4
    assert nb["metadata"].get("kernelspec", {}).get("name") == "python3"
    dirty = [k for k, c in enumerate(nb["cells"]) if c["cell_type"] == "code" and
             (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, f"{name}: code cells {dirty} have stored outputs or execution counts"


def _execute(name):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as e:
        # the message has the failing cell's source and its traceback (IPython colours it)
        pytest.fail(f"{name}: a cell raised\n" + re.sub(r"\x1b\[[0-9;]*m", "", str(e)),
                    pytrace=False)
    for k, cell in enumerate(nb.cells):  # an error output without an exception, if any
        for out in cell.get("outputs", []):
            assert out.output_type != "error", \
                f"{name} cell {k}: {out.ename}: {out.evalue}\n{cell.source}"
    return nb


def _tagged(nb, tag):
    cells = [c for c in nb.cells if tag in c.metadata.get("tags", [])]
    assert len(cells) == 1, f"one cell tagged {tag!r} expected, found {len(cells)}"
    return cells[0]


def _text(cell) -> str:
    """Everything a cell showed, as text: streams and every textual mime type."""
    parts = []
    for out in cell.outputs:
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type in ("display_data", "execute_result"):
            for mime, data in out.data.items():
                if mime.startswith("text/") or mime.endswith("json"):
                    parts.append(data if isinstance(data, str) else json.dumps(data))
    return "\n".join(parts)


def _mimes(cell) -> set:
    return {m for out in cell.outputs if out.output_type in ("display_data", "execute_result")
            for m in out.data}


def _has_image(cell) -> bool:
    return bool({"image/png", "image/svg+xml"} & _mimes(cell)) or \
        "data:image/svg+xml" in _text(cell) or "<svg" in _text(cell)


def check_tour(nb):
    assert "max abs error vs numpy" in _text(_tagged(nb, "check"))
    assert "polytc_kernel" in _text(_tagged(nb, "code"))  # the generated C entry point
    assert "polytc_kernel" in _text(_tagged(nb, "compiled"))
    explained = _text(_tagged(nb, "explain"))
    assert "Loop structure from isl's scheduler" in explained.replace("&#x27;", "'")
    assert "numpy" in _text(_tagged(nb, "benchmark"))


def check_schedules(nb):
    explored = _tagged(nb, "explore")
    assert "text/html" in _mimes(explored) and "<table" in _text(explored)
    assert _has_image(explored)  # the plot inside the HTML table
    assert "image/png" in _mimes(_tagged(nb, "plot"))
    assert "<table" in _text(_tagged(nb, "diff"))  # side by side
    assert "fusion" in _text(_tagged(nb, "explain"))
    assert "mark parallel" in _text(_tagged(nb, "final_schedule"))
    illegal = _text(_tagged(nb, "illegal"))
    assert "ScheduleError" in illegal and "interchange(0, 0, 1) is illegal" in illegal
    assert "dependence S0(i=0, j=1) -> S1(i=1, j=0) on 'B'" in illegal
    assert "hand schedule" in _text(_tagged(nb, "hand_timing"))
    assert _has_image(_tagged(nb, "autotune"))  # the live plot's last frame


def check_onnx(nb):
    assert "<svg" in _text(_tagged(nb, "session"))  # the graph, coloured by group
    assert "def g" in _text(_tagged(nb, "group_tc"))
    assert "polytc_kernel" in _text(_tagged(nb, "group_code"))
    assert "max abs error vs onnxruntime" in _text(_tagged(nb, "compare"))
    latency = _tagged(nb, "latency")
    assert "onnxruntime" in _text(latency) and _has_image(latency)


CHECKS = {"01_tour.ipynb": check_tour, "02_schedules.ipynb": check_schedules,
          "03_onnx.ipynb": check_onnx}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs(name):
    if name == "03_onnx.ipynb":
        pytest.importorskip("onnxruntime")
    pytest.importorskip("matplotlib")
    CHECKS[name](_execute(name))
