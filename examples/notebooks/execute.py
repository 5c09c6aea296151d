"""Run notebooks from the command line, as CI and `make figures` do.

    python3 examples/notebooks/execute.py [--ci] [--figures DIR] [--write] NOTEBOOK...

Each notebook runs top to bottom in a fresh kernel (nbclient and ipykernel),
in its own folder, with the scralloc this interpreter imports first on the
kernel's path.  --ci runs the CI size (SCRALLOC_NOTEBOOK_SIZE=ci); --figures
DIR saves the README's figures there (SCRALLOC_FIGURES); --write writes the
outputs back into the notebook (they are committed without, see README.md).
"""
import argparse
import os
import sys
import time


def execute(path, ci=False, figures=None, timeout=600):
    """Run the notebook at path; return (the executed notebook, seconds)."""
    import nbclient
    import nbformat

    import scralloc

    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(scralloc.__file__)))
    saved = {k: os.environ.get(k) for k in ("PYTHONPATH", "SCRALLOC_NOTEBOOK_SIZE", "SCRALLOC_FIGURES")}
    os.environ["PYTHONPATH"] = pkg_parent + os.pathsep + os.environ.get("PYTHONPATH", "")
    os.environ["SCRALLOC_NOTEBOOK_SIZE"] = "ci" if ci else "full"
    if figures:
        os.makedirs(figures, exist_ok=True)
        os.environ["SCRALLOC_FIGURES"] = os.path.abspath(figures)
    else:
        os.environ.pop("SCRALLOC_FIGURES", None)
    try:
        nb = nbformat.read(path, as_version=4)
        client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                         resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}})
        t = time.monotonic()
        client.execute()
        return nb, time.monotonic() - t
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ci", action="store_true", help="the CI size")
    ap.add_argument("--figures", help="save the README's figures in this folder")
    ap.add_argument("--write", action="store_true", help="write the outputs into the notebooks")
    ap.add_argument("notebooks", nargs="+")
    args = ap.parse_args()
    import nbformat

    for path in args.notebooks:
        nb, seconds = execute(path, ci=args.ci, figures=args.figures)
        print(f"{path}: ran in {seconds:.1f} s", flush=True)
        if args.write:
            nbformat.write(nb, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
