#!/usr/bin/env python3
"""Runs one of examples/ as written (from the repository root, at a small size through its
options) and checks what it prints.

usage: check_examples.py EMBER NAME     NAME: tensors mlp cnn custom_dataset ddp pagerank pytorch
                                                char_lstm char_gpt char_pipelines
Exits 77 ("skipped") when what the example needs is missing (PyTorch for `pytorch`).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

EMBER = os.path.abspath(sys.argv[1])
NAME = sys.argv[2]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TMP = tempfile.mkdtemp(prefix=f"ember-example-{NAME}-")
failures = []


def check(what, cond, detail=""):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)
        if detail:
            print("     " + str(detail).replace("\n", "\n     "))


def run(*args, exe=EMBER, timeout=300):
    env = dict(os.environ)
    env.setdefault("EMBER_NUM_THREADS", "2")
    p = subprocess.run([exe, *args], cwd=REPO, env=env, capture_output=True, text=True, errors="replace",
                       timeout=timeout)
    print(f"$ {os.path.basename(exe)} {' '.join(args)}   (exit {p.returncode})\n{p.stdout}{p.stderr}")
    if p.returncode != 0:
        check(f"{' '.join(args[:1])} exits 0", False, p.stderr[-2000:])
    return p.stdout


def number(pattern, text, what):
    """The last number the pattern's group matches in text (NaN, recorded as a failure, if none)."""
    found = re.findall(pattern, text, re.M)
    check(f"{what} printed", bool(found), f"/{pattern}/ not in the output")
    return float(found[-1]) if found else float("nan")


def tensors():
    out = run("examples/tensors.lua")
    check("the tour's checkpoint reloads equal", "equal:\ttrue" in out)
    check("softmax rows sum to one", re.search(r"softmax row sums\s+tensor\(\[1\.0000, 1\.0000, 1\.0000, 1\.0000\]",
                                               out) is not None)


def mlp():
    small = ["--limit", "2000", "--test-limit", "1000"]
    whole = run("examples/mlp.lua", "--epochs", "3", *small, "--dir", f"{TMP}/whole")
    acc = number(r"^test accuracy: ([\d.]+)$", whole, "test accuracy")
    check(f"MLP, 3 epochs on 2000 images: test accuracy {acc} >= 0.70", acc >= 0.70)
    check("three epochs logged", len(re.findall(r"^epoch \d+  loss", whole, re.M)) == 3)
    reloaded = number(r"^reloaded .*: test accuracy ([\d.]+)$", whole, "reloaded accuracy")
    check("the checkpoint, reloaded into a new model, scores the same", reloaded == acc)
    # interrupted after epoch 2, then resumed: the same numbers as the unbroken run
    first = run("examples/mlp.lua", "--epochs", "3", "--stop-after", "2", *small, "--dir", f"{TMP}/broken")
    check("--stop-after 2 stops after epoch 2", "stopped after epoch 2" in first and "epoch 3 " not in first)
    second = run("examples/mlp.lua", "--epochs", "3", "--resume", *small, "--dir", f"{TMP}/broken")
    check("--resume starts at epoch 3", "(epoch 2)" in second and re.search(r"^epoch 1 ", second, re.M) is None)
    resumed = number(r"^test accuracy: ([\d.]+)$", second, "resumed accuracy")
    loss = lambda text: re.search(r"^epoch 3  loss ([\d.]+)", text, re.M)
    check(f"resumed run ends where the unbroken one does ({resumed} vs {acc}, same epoch-3 loss)",
          resumed == acc and loss(whole) and loss(second) and loss(whole).group(1) == loss(second).group(1))


def cnn():
    out = run("examples/cnn.lua", "--epochs", "1", "--limit", "2000", "--test-limit", "1000", "--dir", f"{TMP}/cnn")
    acc = number(r"^test accuracy: ([\d.]+)$", out, "test accuracy")
    check(f"CNN, 1 epoch on 2000 images: test accuracy {acc} >= 0.55", acc >= 0.55)
    reloaded = number(r"^reloaded .*: test accuracy ([\d.]+)$", out, "reloaded accuracy")
    check("the checkpoint, reloaded into a new model, scores the same", reloaded == acc)
    check("checkpoint files written", all(os.path.exists(f"{TMP}/cnn/{f}.safetensors") for f in ("model", "optim")))


def custom_dataset():
    out = run("examples/custom_dataset.lua", "--epochs", "3", "--samples", "3000", "--workers", "2")
    acc = number(r"^held-out accuracy: ([\d.]+)$", out, "held-out accuracy")
    check(f"spirals after 3 epochs: held-out accuracy {acc} >= 0.85", acc >= 0.85)
    trainer = re.search(r"this trainer is pid (\d+)", out)
    readers = re.findall(r"(\d+) \((\d+) samples\)", out)
    pids = {int(p) for p, _ in readers}
    # which of the 2 readers makes which batch is the scheduler's choice (on a busy machine one
    # may make them all): what must hold is that readers, not the trainer, made them
    check(f"samples made by reader processes (at most 2), not the trainer ({sorted(pids)})",
          1 <= len(pids) <= 2 and trainer is not None and int(trainer.group(1)) not in pids)
    check("every sample of the 3 epochs delivered once", sum(int(n) for _, n in readers) == 3 * 3000,
          f"{sum(int(n) for _, n in readers)} samples")


def ddp():
    small = ["--epochs", "1", "--limit", "4000", "--test-limit", "1000"]
    out = run("launch", "-n", "2", "--threads", "1", "examples/ddp.lua", *small, "--dir", f"{TMP}/ddp")
    acc = number(r"test accuracy: ([\d.]+) on 1000 images", out, "test accuracy")
    check(f"2 ranks, 1 epoch on 4000 images: test accuracy {acc} >= 0.60", acc >= 0.60)
    check("both ranks end with the same parameters", "parameters identical on all 2 ranks: true" in out)
    check("rank 0 saved the checkpoint", os.path.exists(f"{TMP}/ddp/model.safetensors"))
    # 2 ranks of 64 samples per step average the gradient of the same 128 samples as one
    # process with batches of 128: the same training up to rounding.
    one = run("examples/ddp.lua", *small, "--batch-size", "128", "--dir", f"{TMP}/one")
    single = number(r"test accuracy: ([\d.]+) on 1000 images", one, "one-process accuracy")
    check(f"one process with batches of 128 ends within 0.005 of 2 ranks x 64 ({single} vs {acc})",
          abs(single - acc) <= 0.005)


def pagerank_reference(path, damping=0.85, iterations=200):
    """PageRank of a SNAP edge list by plain power iteration (numpy): dangling mass spread evenly."""
    import numpy as np
    edges = [tuple(map(int, l.split())) for l in open(path) if l.strip() and not l.startswith("#")]
    ids = sorted({v for e in edges for v in e})
    index = {v: i for i, v in enumerate(ids)}
    n = len(ids)
    src = np.array([index[a] for a, _ in edges])
    dst = np.array([index[b] for _, b in edges])
    out_deg = np.bincount(src, minlength=n).astype(float)
    x = np.full(n, 1.0 / n)
    for _ in range(iterations):
        share = np.where(out_deg > 0, x / np.maximum(out_deg, 1), 0)
        x = damping * np.bincount(dst, weights=share[src], minlength=n) + \
            ((1 - damping) + damping * x[out_deg == 0].sum()) / n
    in_deg = np.bincount(dst, minlength=n)
    return {ids[i]: (x[i], int(in_deg[i])) for i in range(n)}


def pagerank():
    out = run("examples/pagerank.lua")
    check("converged", re.search(r"iterations, residual \S+, converged true", out) is not None)
    total = number(r"^sum of scores: ([\d.]+)$", out, "sum of scores")
    check(f"scores sum to 1 ({total})", abs(total - 1) < 1e-5)
    moved = number(r"moves the scores by (\S+) \(L1\)", out, "hand iteration")
    check(f"one more iteration by hand moves the scores by {moved} < 1e-5", moved < 1e-5)
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+([\d.]+)\s+(\d+)\s+(\d+)$", out, re.M)
    check("a top-10 table", len(rows) == 10, rows)
    ref = pagerank_reference(os.path.join(REPO, "examples/data/follows.txt"))
    best = sorted(ref, key=lambda v: -ref[v][0])[:10]
    check("the top 10 are numpy's power iteration's top 10, in order", [int(r[1]) for r in rows] == best,
          f"ember {[int(r[1]) for r in rows]}, numpy {best}")
    worst = max((abs(float(r[2]) - ref[int(r[1])][0]) for r in rows), default=1)
    check(f"their scores agree with numpy's to 1e-5 (worst {worst:.2e})", worst < 1e-5)
    check("their in-degrees are the edge list's", all(int(r[3]) == ref[int(r[1])][1] for r in rows))
    for k in (10, 100):
        m = re.search(rf"^top {k} by PageRank and by in-degree: (\d+) in common, Kendall tau (-?[\d.]+)$", out, re.M)
        check(f"top {k} comparison with in-degree printed", m is not None)
        if not m:
            continue
        check(f"  tau {m.group(2)} within [-1, 1]", -1 <= float(m.group(2)) <= 1)
        # the overlap, recounted, where the k-th and (k+1)-th in-degrees differ (no tie decides it)
        by_degree = sorted(ref, key=lambda v: -ref[v][1])
        if k < len(ref) and ref[by_degree[k - 1]][1] != ref[by_degree[k]][1]:
            top_pr = set(sorted(ref, key=lambda v: -ref[v][0])[:k])
            common = len(top_pr & set(by_degree[:k]))
            check(f"  overlap {m.group(1)} is numpy's count {common}", int(m.group(1)) == common)
        elif k >= len(ref):
            check(f"  overlap {m.group(1)}: every vertex", int(m.group(1)) == len(ref))


def pytorch():
    try:
        import safetensors  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        print(f"skipped: {e} (scripts/setup.sh installs torch and safetensors from PyPI)")
        sys.exit(77)
    # The CNN (convolution layouts) on every test image, and the MLP (a Sequential's names).
    for model, limit in (("cnn", "2000"), ("mlp", "2000")):
        out = run(f"examples/{model}.lua", "--epochs", "1", "--limit", limit, "--test-limit", "0",
                  "--dir", f"{TMP}/{model}")
        ember_acc = number(r"^test accuracy: ([\d.]+)$", out, f"{model}: ember's accuracy")
        py = run("examples/load_in_pytorch.py", f"{TMP}/{model}", exe=sys.executable)
        torch_acc = number(r"^pytorch test accuracy: ([\d.]+) on 10000 images$", py, f"{model}: PyTorch's accuracy")
        recorded = number(r"^ember test accuracy:\s+([\d.]+)$", py, f"{model}: ember's accuracy in the checkpoint")
        check(f"{model}: PyTorch's accuracy {torch_acc} equals ember's {ember_acc} (within 1e-6, 10000 images)",
              abs(torch_acc - recorded) <= 1e-6 and abs(recorded - ember_acc) <= 5e-5)


def plots():
    out_dir = os.path.join(TMP, "plots")
    out = run("examples/plots.lua", out_dir)
    for name in ("line.png", "line.svg", "scatter_hist.png", "fashion_mnist.png", "curves.png", "rank_rank.png"):
        path = os.path.join(out_dir, name)
        check(f"plots: {name} listed", name in out)
        head = open(path, "rb").read(64) if os.path.exists(path) else b""
        want = b"<?xml" if name.endswith(".svg") else b"\x89PNG\r\n\x1a\n"
        check(f"plots: {name} is a {'SVG' if name.endswith('.svg') else 'PNG'} file", head.startswith(want),
              repr(head[:16]))


FORTUNES = "/usr/share/games/fortunes"


def need_fortunes():
    if not os.path.isdir(FORTUNES):
        print(f"skipped: {FORTUNES} is missing (Debian package fortunes; scripts/setup.sh installs it)")
        sys.exit(77)


def sample(checkpoint, *extra):
    """examples/sample.lua on a checkpoint: the prompt, then generated text."""
    out = run("examples/sample.lua", checkpoint, "--prompt", "The ", "--length", "80", *extra)
    check("sample.lua prints the prompt and then generated text", out.startswith("The ") and len(out) > 60, out[:200])
    return out


def char_script(name, *size):
    need_fortunes()
    out = run(f"examples/{name}.lua", *size, "--eval-every", "20", "--dir", f"{TMP}/{name}")
    losses = [float(v) for v in re.findall(r"val_loss ([\d.]+)", out)]
    final = number(r"^val loss: ([\d.]+)", out, "the final validation loss")
    check(f"{name}: validation loss falls ({losses})", len(losses) >= 2 and losses[-1] < losses[0] - 0.2)
    check(f"{name}: validation loss {final} below a uniform guess over the characters (ln 114 = 4.74)", final < 4.0)
    check("the tokenizer is saved beside the checkpoint", os.path.exists(f"{TMP}/{name}/tokenizer.txt"))
    sample(f"{TMP}/{name}/model.safetensors", "--top_k", "5", "--temperature", "0.8")


def char_lstm():
    char_script("char_lstm", "--steps", "60", "--hidden", "48", "--val-blocks", "40")


def char_gpt():
    char_script("char_gpt", "--steps", "60", "--embed", "32", "--layers", "2", "--warmup", "5", "--val-blocks", "48")


def result_of(out):
    """The JSON result line `ember run` prints last."""
    import json
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def char_pipelines():
    need_fortunes()
    small = ["data.source.samples=300", "data.val.limit=20", "model.args.hidden=32", "log.progress=none"]
    d = f"{TMP}/lstm"
    whole = result_of(run("run", "pipelines/char_lstm.yaml", "epochs=2", *small, f"checkpoint.dir={d}/whole",
                          f"log.dir={d}/whole"))
    check("char_lstm reports train/val loss and perplexity",
          all(k in whole for k in ("train_loss", "val_loss", "val_perplexity", "train_perplexity")), whole)
    check("perplexity is exp(loss)", abs(whole.get("val_perplexity", 0) - 2.718281828 ** whole.get("val_loss", 0)) < 1e-6)
    check("the tokenizer is saved beside the checkpoints", os.path.exists(f"{d}/whole/tokenizer.txt"))
    run("run", "pipelines/char_lstm.yaml", "epochs=2", "stop_after_epoch=1", *small, f"checkpoint.dir={d}/broken",
        f"log.dir={d}/broken")
    resumed = result_of(run("run", "pipelines/char_lstm.yaml", "epochs=2", "resume=true", *small,
                            f"checkpoint.dir={d}/broken", f"log.dir={d}/broken"))
    check(f"a run stopped after epoch 1 and resumed ends where the unbroken one does "
          f"({resumed.get('val_loss')} vs {whole.get('val_loss')})",
          resumed.get("val_loss") == whole.get("val_loss") and resumed.get("train_loss") == whole.get("train_loss"))
    sample(f"{d}/whole", "--temperature", "0.9")
    g = f"{TMP}/gpt"
    gpt = result_of(run("run", "pipelines/char_gpt.yaml", "epochs=1", "data.source.samples=240", "data.val.limit=24",
                        "model.args.embed=32", "model.args.layers=1", "schedule.warmup_steps=4",
                        "log.progress=none", f"checkpoint.dir={g}", f"log.dir={g}"))
    check(f"char_gpt trains: val loss {gpt.get('val_loss')} below ln 114 = 4.74", gpt.get("val_loss", 9) < 4.74)
    sample(g, "--top_k", "10")


try:
    {"tensors": tensors, "plots": plots, "mlp": mlp, "cnn": cnn, "custom_dataset": custom_dataset, "ddp": ddp,
     "pagerank": pagerank, "pytorch": pytorch, "char_lstm": char_lstm, "char_gpt": char_gpt,
     "char_pipelines": char_pipelines}[NAME]()
finally:
    shutil.rmtree(TMP, ignore_errors=True)
if failures:
    print(f"{len(failures)} check(s) failed: " + "; ".join(failures))
    sys.exit(1)
print(f"examples/{NAME}: all checks passed")
