"""Run notebooks from the command line, as CI and `make figures` do.

    python3 examples/notebooks/execute.py [--ci] [--figures DIR] [--out DIR | --write] NOTEBOOK...

Each notebook runs top to bottom in a fresh kernel (nbclient and ipykernel),
in its own folder, with the scralloc this interpreter imports first on the
kernel's path, and the executed copy, outputs and figures included, is
written to --out DIR (default build/notebooks, under the current folder)
with the notebook's file name.  --ci runs the CI size
(SCRALLOC_NOTEBOOK_SIZE=ci); --figures DIR saves the README's figures there
(SCRALLOC_FIGURES); --write writes the outputs into the notebook itself
instead (they are committed without, see README.md).
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
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--out", default=os.path.join("build", "notebooks"),
                       help="write the executed copies in this folder (default: %(default)s)")
    where.add_argument("--write", action="store_true", help="write the outputs into the notebooks themselves")
    ap.add_argument("notebooks", nargs="+")
    args = ap.parse_args()
    import nbformat

    targets = {path: path if args.write else os.path.join(args.out, os.path.basename(path))
               for path in args.notebooks}
    for path, written in targets.items():
        if not args.write and os.path.exists(written) and os.path.samefile(written, path):
            ap.error(f"--out {args.out} would overwrite {path}: use --write for that")
    for path, written in targets.items():
        nb, seconds = execute(path, ci=args.ci, figures=args.figures)
        os.makedirs(os.path.dirname(written) or ".", exist_ok=True)
        nbformat.write(nb, written)
        print(f"{path}: ran in {seconds:.1f} s, written to {written}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
