#!/usr/bin/env python3
"""examples/notebook.ipynb executed top to bottom by the real clients (nbclient, and
`jupyter nbconvert --execute` when nbconvert is installed) on `ember kernel`.

usage: test_notebook.py EMBER NOTEBOOK OUTDIR

Checks the outputs: no errors; the tensor cell has a text/html table; a PNG display_data is
present (the Fashion-MNIST grid) and decodes as PNG; plots come back as image/png results
(the loss curve, the PageRank rank-rank plot); the help cell prints a signature. The
executed notebook and its pictures are written to OUTDIR (to look at). Exits 77 (skipped)
without nbclient or without the kernel in this build.
"""
import atexit
import base64
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

try:
    import nbformat
    from nbclient import NotebookClient
except ImportError as e:
    print(f"skipped: {e} (pip install nbclient nbformat)")
    sys.exit(77)

EMBER, NOTEBOOK, OUTDIR = (os.path.abspath(a) for a in sys.argv[1:4])
del sys.argv[1:4]
PNG = b"\x89PNG\r\n\x1a\n"


def install():
    prefix = tempfile.mkdtemp(prefix="ember-nb-")
    atexit.register(shutil.rmtree, prefix, ignore_errors=True)
    p = subprocess.run([EMBER, "kernel", "install", "--prefix", prefix], capture_output=True, text=True)
    if p.returncode != 0 and "built without the kernel" in p.stderr:
        print("skipped: this ember has no kernel (ZeroMQ or libcrypto missing)")
        sys.exit(77)
    assert p.returncode == 0, p.stderr
    os.environ["JUPYTER_PATH"] = os.path.join(prefix, "share", "jupyter")


def outputs(nb):
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            for o in cell.outputs:
                yield i, cell, o


class NotebookTest(unittest.TestCase):
    def check(self, nb, tag):
        errors = [(i, o) for i, _, o in outputs(nb) if o.output_type == "error"]
        self.assertEqual(errors, [])
        html = [o for _, c, o in outputs(nb) if o.output_type == "execute_result" and "text/html" in o.data
                and "ember.randn" in c.source]
        self.assertEqual(len(html), 1)
        self.assertIn("<table", html[0].data["text/html"])
        self.assertIn("tensor float64 [4, 6] cpu", html[0].data["text/html"])
        shown = [o for _, _, o in outputs(nb) if o.output_type == "display_data" and "image/png" in o.data]
        self.assertGreaterEqual(len(shown), 1)
        plots = [(c, o) for _, c, o in outputs(nb) if o.output_type == "execute_result" and "image/png" in o.data]
        self.assertTrue(any("rank_rank" in c.source for c, _ in plots))
        self.assertTrue(any("training loss" in c.source for c, _ in plots))
        help_text = "".join(o.get("text", "") for _, c, o in outputs(nb) if c.source.startswith("?"))
        self.assertIn("ember.nn.Linear(in_features, out_features", help_text)
        os.makedirs(OUTDIR, exist_ok=True)
        n = 0
        for _, _, o in outputs(nb):
            if "image/png" in o.get("data", {}):
                png = base64.b64decode(o.data["image/png"])
                self.assertEqual(png[:8], PNG)
                n += 1
                with open(os.path.join(OUTDIR, f"{tag}_{n}.png"), "wb") as f:
                    f.write(png)
        nbformat.write(nb, os.path.join(OUTDIR, f"notebook_{tag}.ipynb"))

    def test_nbclient(self):
        nb = nbformat.read(NOTEBOOK, as_version=4)
        NotebookClient(nb, kernel_name="ember", timeout=300, resources={"metadata": {"path": OUTDIR}}).execute()
        self.check(nb, "nbclient")

    def test_nbconvert(self):
        try:
            import nbconvert  # noqa: F401
        except ImportError:
            self.skipTest("nbconvert is not installed")
        out = os.path.join(OUTDIR, "notebook_nbconvert_raw.ipynb")
        os.makedirs(OUTDIR, exist_ok=True)
        p = subprocess.run([sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute", NOTEBOOK,
                            "--output", out], capture_output=True, text=True, timeout=600, cwd=OUTDIR)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.check(nbformat.read(out, as_version=4), "nbconvert")


if __name__ == "__main__":
    install()
    os.makedirs(OUTDIR, exist_ok=True)
    unittest.main(verbosity=2)
