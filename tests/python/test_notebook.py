"""examples/memory_over_time.ipynb runs, when Jupyter's tooling is installed.

Skipped unless nbformat, nbclient, ipykernel and matplotlib are importable: none of them is a test
dependency of the project.  The notebook is executed in memory (the file is not rewritten), with a
kernel that imports the same scralloc as this test process.
"""
import os

import pytest

import scralloc

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def test_memory_over_time_notebook(monkeypatch):
    pkg_parent = os.path.dirname(os.path.dirname(scralloc.__file__))
    monkeypatch.setenv("PYTHONPATH", pkg_parent + os.pathsep + os.environ.get("PYTHONPATH", ""))
    nb = nbformat.read(os.path.join(EXAMPLES, "memory_over_time.ipynb"), as_version=4)
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": EXAMPLES}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert any("image/png" in o.get("data", {}) for o in outputs), "no figure"
    table = "".join(o.get("text", "") for o in outputs)
    assert f"SCR_DEBUG={scralloc.DEBUG}" in table, "the kernel imported another scralloc"
    rows = {int(line.split()[0]): line.split() for line in table.splitlines()
            if line.split() and line.split()[0].isdigit()}
    assert sorted(rows) == [0, 1, 8]
    churn_madvise = {r: int(v[1].replace(",", "")) for r, v in rows.items()}
    assert churn_madvise[8] < churn_madvise[1] < churn_madvise[0]
