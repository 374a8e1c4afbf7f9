#!/usr/bin/env python3
"""The ember REPL in a real terminal (tmux): banner, expression printing, multi-line input,
table pretty-printing, error then continue, tab completion (global, field, string and
tensor methods), history kept in EMBER_HISTORY across two sessions and bounded, Ctrl-C
interrupting a running loop, Ctrl-C at the prompt, Ctrl-D exit with status 0.

usage: test_tty.py path/to/ember      (exits 77, "skipped", when tmux is missing)
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

EMBER = os.path.abspath(sys.argv[1])
TMUX = shutil.which("tmux")
if not TMUX:
    print("tmux not found: skipped")
    sys.exit(77)

SOCKET = f"ember-test-{os.getpid()}"
TMP = tempfile.mkdtemp(prefix="ember-tty-")
HISTORY = os.path.join(TMP, "history")
failures = []


def tmux(*args, check=True):
    return subprocess.run([TMUX, "-L", SOCKET, "-f", "/dev/null", *args], capture_output=True,
                          text=True, check=check).stdout


class Session:
    """One ember process in a tmux window; the shell around it reports its exit status."""

    def __init__(self, name):
        self.name = name
        env = {"EMBER_HISTORY": HISTORY, "EMBER_NUM_THREADS": "2", "HOME": TMP}
        for key in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"):
            if key in os.environ:
                env[key] = os.environ[key]
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        # The shell traps SIGINT (a trap, unlike an ignore, is not inherited): Ctrl-C goes to the
        # whole foreground group, and a plain sh would quit once ember returned.
        command = f"trap : INT; env {prefix} {shlex.quote(EMBER)}; echo \"[exit $?]\"; sleep 60"
        tmux("new-session", "-d", "-s", name, "-x", "120", "-y", "50", "sh", "-c", command)

    def screen(self):
        return tmux("capture-pane", "-p", "-J", "-S", "-", "-t", self.name, check=False)

    def type(self, text, enter=True):
        tmux("send-keys", "-t", self.name, "-l", text)
        if enter:
            self.key("Enter")

    def key(self, *names):
        tmux("send-keys", "-t", self.name, *names)

    def wait(self, pattern, what, timeout=5.0):
        """Polls the screen until pattern (a regex) matches; records a failure if it never does."""
        deadline = time.time() + timeout
        while True:
            text = self.screen()
            m = re.search(pattern, text, re.M)
            if m:
                print(f"ok   {what}")
                return m
            if time.time() > deadline:
                failures.append(what)
                print(f"FAIL {what}: /{pattern}/ not on screen:\n{text.rstrip()}\n")
                return None
            time.sleep(0.05)

    def ready(self, what="prompt", timeout=5.0):
        """Waits for an empty prompt on the last line: keys typed before it would be echoed
        by the terminal itself (cooked mode while a statement runs), not by readline."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            lines = self.screen().rstrip().split("\n")
            if lines and re.fullmatch(r">\s?", lines[-1]):
                return True
            time.sleep(0.03)
        failures.append(f"{what}: no empty prompt")
        print(f"FAIL {what}: no empty prompt:\n{self.screen().rstrip()}\n")
        return False


def check(cond, what, detail=""):
    if cond:
        print(f"ok   {what}")
    else:
        failures.append(what)
        print(f"FAIL {what}: {detail}")


try:
    # A history file longer than the bound: the REPL keeps the last 1000 lines.
    with open(HISTORY, "w") as f:
        for i in range(1100):
            f.write(f"old_line_{i}\n")

    s = Session("one")
    s.wait(r"^ember \S+ \| LuaJIT .* \| threads: 2 \| devices: cpu", "banner")
    s.wait(r"^> $", "first prompt")

    s.type("1000 + 234")
    s.wait(r"^1234$", "expression value printed")
    s.type("'a', nil, 3")
    s.wait(r"^a\tnil\t3$|^a +nil +3$", "several values separated by tabs")

    s.type("function sq(x)")
    s.wait(r"^\.\.\. $", "continuation prompt")
    s.type("  return x * x")
    s.type("end")
    s.type("sq(111)")
    s.wait(r"^12321$", "multi-line function definition")

    s.type("{b = 2, a = {1, 2}, [10] = 'x', s = 'q'}")
    s.wait(r'^\{\[10\] = "x", a = \{1, 2\}, b = 2, s = "q"\}$', "table pretty-printed, keys sorted")

    s.type("error('oops_marker')")
    s.wait(r"^stdin:1: oops_marker$", "error message")
    s.wait(r"^stack traceback:$", "error traceback")
    s.type("40 + 2")
    s.wait(r"^42$", "REPL continues after an error")

    s.type("my_unique_global_xyz = 777")
    s.ready()
    s.type("my_unique_glo", enter=False)
    s.key("Tab")
    s.wait(r"^> my_unique_global_xyz$", "tab completes a global")
    s.key("Enter")
    s.wait(r"^777$", "completed global evaluates")

    s.ready()
    s.type("string.fo", enter=False)
    s.key("Tab")
    s.wait(r"^> string\.format$", "tab completes string.fo to string.format")
    s.type("('%05d', 42)")
    s.wait(r"^00042$", "completed library function runs")

    s.type("word = 'shout'")
    s.ready()
    s.type("word:upp", enter=False)
    s.key("Tab")
    s.wait(r"^> word:upper$", "tab completes a string method after ':'")
    s.type("()")
    s.wait(r"^SHOUT$", "completed method runs")

    s.type("t = ember.zeros(2, 3)")
    s.ready()
    s.type("t:nume", enter=False)
    s.key("Tab")
    s.wait(r"^> t:numel$", "tab completes a tensor method")
    s.type("()")
    s.wait(r"^6$", "completed tensor method runs")

    s.type("while true do end")
    time.sleep(0.3)
    s.key("C-c")
    s.wait(r"interrupted", "Ctrl-C interrupts while true do end")
    s.type("5000 + 5")
    s.wait(r"^5005$", "prompt back after the interrupt")

    s.type("local i = 0 while true do i = i + 1 end")
    time.sleep(0.3)
    s.key("C-c")
    s.type("6000 + 6")
    s.wait(r"^6006$", "Ctrl-C interrupts a counting loop too")

    s.ready()
    s.type("this_is_not_lua garbage", enter=False)
    s.wait(r"^> this_is_not_lua garbage$", "partial line typed")
    s.key("C-c")
    s.type("7000 + 7")
    s.wait(r"^7007$", "Ctrl-C at the prompt clears the line")
    check("this_is_not_lua" not in s.screen().split("7000 + 7")[-1] and
          "syntax error" not in s.screen(), "cleared line never ran")

    s.type("function half_done()", enter=True)
    s.wait(r"^\.\.\. $", "inside a multi-line statement")
    s.key("C-c")
    s.type("8000 + 8")
    s.wait(r"^8008$", "Ctrl-C drops a half-entered statement")

    s.type("hist_marker = 4242")
    s.ready()
    s.key("C-d")
    s.wait(r"^\[exit 0\]$", "Ctrl-D exits with status 0")

    with open(HISTORY) as f:
        lines = f.read().splitlines()
    check(len(lines) == 1000, "history bounded to 1000 lines", f"{len(lines)} lines")
    check(lines and lines[-1] == "hist_marker = 4242", "history file ends with the last line",
          lines[-3:])
    check("old_line_1099" in lines and "old_line_0" not in lines, "oldest history lines dropped")

    s2 = Session("two")
    s2.wait(r"^> $", "second session prompt")
    s2.ready()
    s2.key("Up")
    s2.wait(r"^> hist_marker = 4242$", "history from the first session")
    s2.key("Enter")
    s2.type("hist_marker + 1")
    s2.wait(r"^4243$", "recalled line runs")
    s2.ready()
    s2.key("C-d")
    s2.wait(r"^\[exit 0\]$", "second session exits with status 0")
finally:
    tmux("kill-server", check=False)
    shutil.rmtree(TMP, ignore_errors=True)

if failures:
    print(f"\n{len(failures)} failure(s): {failures}")
    sys.exit(1)
print("\nall REPL terminal checks passed")
