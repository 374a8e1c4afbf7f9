#!/usr/bin/env python3
"""examples/repl_session.md: a real REPL session, recorded and checked.

The ember REPL runs on a pseudo-terminal (so it prints its banner and prompts and reads through
line editing, as for a person); the lines of the transcript after the prompts ("> ", "... ") are
typed one at a time, each once the REPL prompts for it, then Ctrl-D. The screen is the
transcript, with the checkout's path shortened (tracebacks name the Lua library's files).

  repl_transcript.py EMBER examples/repl_session.md           check: the session, replayed, prints
                                                               the same (the banner line by shape;
                                                               the file:line frames of a traceback,
                                                               tab-indented, are not compared)
  repl_transcript.py EMBER examples/repl_session.md --write   record it again from SESSION below
"""
import os
import pty
import re
import select
import subprocess
import sys
import termios
import time

# What the recorded session types (the --write input; a check types what the file shows).
SESSION = [
    "ember.manual_seed(0)",
    "x = ember.tensor({{1, 2}, {3, 4}})",
    "x:matmul(x)",
    "x:sum(2)               -- dims count from 1",
    "x.shape, x.dtype",
    "w = ember.randn(2, 3):requires_grad_()",
    "loss = x:matmul(w):relu():sum()",
    "loss:backward()",
    "w.grad",
    "x + ember.ones(3)      -- an error, then the REPL goes on",
    "model = ember.nn.Sequential{ember.nn.Linear(2, 8), ember.nn.ReLU(), ember.nn.Linear(8, 3)}",
    "model",
    "for _, pair in ipairs(model:named_parameters()) do",
    "  print(pair[1], table.concat(pair[2].shape, 'x'))",
    "end",
    "model(x):softmax(2):sum(2)",
    "{lr = 0.05, betas = {0.9, 0.999}}",
]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BANNER = re.compile(r"^ember \d+\.\d+\.\d+ \| LuaJIT \S+ \| threads: \d+ \| devices: .+$")
HEADER = """# A session in the ember REPL

`build/ember` with no arguments starts the REPL: the library is the global `ember`, a bare
expression prints its values (tensors and tables pretty-printed), an unfinished statement
continues on the next line (`...`), an error prints its traceback and the session goes on,
Tab completes names and methods, Ctrl-D exits. See README "The REPL".

This is a real session: `tests/examples/repl_transcript.py` recorded it on a terminal (the
checkout's path shortened in the traceback), and the test suite types it again and checks that
every line still prints what is shown here.

```text
"""
FOOTER = "```\n"


def record(ember, lines, timeout=60):
    """Types lines into the REPL on a pseudo-terminal; returns the screen as text."""
    master, slave = pty.openpty()
    env = dict(os.environ, TERM="dumb", EMBER_HISTORY="", EMBER_NUM_THREADS="2", COLUMNS="100")
    p = subprocess.Popen([ember], cwd=REPO, env=env, stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    screen, pending, deadline = b"", [l.encode() + b"\r" for l in lines] + [b"\x04"], time.time() + timeout
    prompt_at = None
    while time.time() < deadline:
        r, _, _ = select.select([master], [], [], 0.1)
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            screen += chunk
            continue   # read until the REPL is quiet
        if pending and re.search(rb"(^|\n)(> |\.\.\. )$", screen):   # a prompt, nothing more to read
            # Type once line editing has the terminal (canonical mode off: on Linux the master
            # reports the terminal's modes); before that the terminal itself would echo the keys.
            # Without readline the terminal stays canonical: type after a second.
            if prompt_at is None:
                prompt_at = time.time()
            if termios.tcgetattr(master)[3] & termios.ICANON and time.time() - prompt_at < 1:
                continue
            os.write(master, pending.pop(0))
            prompt_at = None
        elif p.poll() is not None:
            break
    if p.poll() is None:
        p.kill()
    p.wait()
    os.close(master)
    text = screen.decode(errors="replace").replace("\r\n", "\n")
    return text.replace(REPO + "/", "")


def inputs_of(transcript):
    """The typed lines: what follows each prompt, up to the final empty prompt."""
    lines = []
    for line in transcript.split("\n"):
        m = re.match(r"^(?:> |\.\.\. )(.*)$", line)
        if m and m.group(1):
            lines.append(m.group(1))
    return lines


def body_of(path):
    text = open(path).read()
    start = text.index("```text\n") + len("```text\n")
    return text[start:text.index("```", start)]


def main():
    ember, path = os.path.abspath(sys.argv[1]), sys.argv[2]
    if "--write" in sys.argv[3:]:
        screen = record(ember, SESSION)
        with open(path, "w") as f:
            f.write(HEADER + screen.rstrip("\n") + "\n" + FOOTER)
        print(f"wrote {path}")
        return 0
    expected = body_of(path)
    typed = inputs_of(expected)
    got = record(ember, typed)
    # a traceback's frames (tab-indented) name library files and lines that change with them
    exp_lines = [l for l in expected.rstrip("\n").split("\n") if not l.startswith("\t")]
    got_lines = [l for l in got.rstrip("\n").split("\n") if not l.startswith("\t")]
    failures = []
    if not got_lines or not BANNER.match(got_lines[0]):
        failures.append(f"banner: {got_lines[:1]}")
    for i in range(1, max(len(exp_lines), len(got_lines))):
        e = exp_lines[i] if i < len(exp_lines) else "<none>"
        g = got_lines[i] if i < len(got_lines) else "<none>"
        if e != g:
            failures.append(f"line {i + 1}: expected {e!r}, got {g!r}")
    print(f"{len(typed)} lines typed, {len(got_lines)} lines on the screen")
    if failures:
        print("FAIL\n" + "\n".join(failures[:20]) + "\n--- the session now:\n" + got)
        return 1
    print("the session prints what examples/repl_session.md shows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
