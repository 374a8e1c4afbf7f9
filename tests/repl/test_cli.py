#!/usr/bin/env python3
"""The ember executable's command line: scripts and arg, -e, -i with piped input, -l, -j,
--threads, stdin scripts, commands (info, run, launch), --help/--version, exit statuses and
error messages.

usage: test_cli.py path/to/ember
"""
import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile

EMBER = os.path.abspath(sys.argv[1])
TMP = tempfile.mkdtemp(prefix="ember-cli-")
atexit.register(shutil.rmtree, TMP, ignore_errors=True)
failures = []


def run(*args, stdin="", env=None, cwd=None):
    full_env = dict(os.environ)
    full_env.setdefault("EMBER_NUM_THREADS", "2")
    full_env.update(env or {})
    p = subprocess.run([EMBER, *args], input=stdin, capture_output=True, text=True,
                       env=full_env, cwd=cwd or TMP, timeout=30)
    return p.returncode, p.stdout, p.stderr


def script(name, text):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def check(name, cond, detail=""):
    if not cond:
        failures.append(f"{name}: {detail}")
        print(f"FAIL {name}\n{detail}")
    else:
        print(f"ok   {name}")


def expect(name, result, rc, out=None, err=None, out_has=(), err_has=(), err_empty=None):
    code, stdout, stderr = result
    problems = []
    if code != rc:
        problems.append(f"exit status {code}, expected {rc}")
    if out is not None and stdout != out:
        problems.append(f"stdout {stdout!r}, expected {out!r}")
    if err is not None and stderr != err:
        problems.append(f"stderr {stderr!r}, expected {err!r}")
    for s in out_has:
        if s not in stdout:
            problems.append(f"stdout lacks {s!r}")
    for s in err_has:
        if s not in stderr:
            problems.append(f"stderr lacks {s!r}")
    if err_empty and stderr:
        problems.append(f"stderr not empty")
    check(name, not problems, "\n".join(problems) + f"\n--- stdout\n{stdout}--- stderr\n{stderr}")


# ---------------------------------------------------------------- --version, --help
code, version, _ = run("-e", "io.write(ember._VERSION)")
check("version from the library", code == 0 and re.fullmatch(r"\d+\.\d+\.\d+", version), version)
expect("--version", run("--version"), 0, err="", out_has=(f"ember {version}", "LuaJIT"))
expect("-v", run("-v"), 0, out_has=(f"ember {version}",))
help_words = ("usage: ember", "ember script.lua", "ember info", "ember run PIPELINE.yaml",
              "key.path=value", "ember launch -n N script.lua", "ember - ", "-e CODE", "-i ",
              "-l NAME", "--threads N", "--version", "--help", "EMBER_NUM_THREADS", "EMBER_HISTORY")
expect("--help lists every command and option", run("--help"), 0, err="", out_has=help_words)
expect("-h", run("-h"), 0, out_has=help_words)

# ---------------------------------------------------------------- usage errors
for opt in ("-x", "--bogus", "-"+"q"):
    expect(f"unknown option {opt}", run(opt), 2, out="",
           err_has=(f"unknown option '{opt}'", "ember --help"))
expect("unknown option after -e", run("-e", "print(1)", "--nope"), 2, out="",
       err_has=("unknown option '--nope'",))
expect("-e without code", run("-e"), 2, out="", err_has=("'-e' needs Lua code",))
expect("-l without name", run("-l"), 2, out="", err_has=("'-l' needs a library name",))
expect("--threads without count", run("--threads"), 2, err_has=("'--threads' needs a thread count",))
for bad in ("0", "abc", "-3", "5000", "2x"):
    expect(f"--threads {bad}", run("--threads", bad, "-e", "print(1)"), 2, out="",
           err_has=(f"got '{bad}'",))

# ---------------------------------------------------------------- scripts and arg
args_lua = script("args.lua", """
local parts = {}
for i = -3, #arg do parts[#parts + 1] = tostring(i) .. '=' .. tostring(arg[i]) end
print(table.concat(parts, ' '))
print('n=' .. select('#', ...), ...)
""")
expect("script arguments and arg", run(args_lua, "a", "b c"), 0, err="",
       out=f"-3=nil -2=nil -1={EMBER} 0={args_lua} 1=a 2=b c\nn=2\ta\tb c\n")
expect("options before the script get negative indices",
       run("--threads", "2", args_lua, "-x"), 0,
       out=f"-3={EMBER} -2=--threads -1=2 0={args_lua} 1=-x\nn=1\t-x\n")
expect("-- ends options", run("--", args_lua, "-e"), 0,
       out=f"-3=nil -2={EMBER} -1=-- 0={args_lua} 1=-e\nn=1\t-e\n")
shebang = script("shebang.lua", "#!/usr/bin/env ember\nprint('shebang skipped', ...)\n")
expect("shebang line skipped", run(shebang, "z"), 0, out="shebang skipped\tz\n")
expect("arg for -e alone", run("-e", "print(arg[-2], arg[-1], arg[0])"), 0,
       out="-e\tprint(arg[-2], arg[-1], arg[0])\tnil\n")

# a script whose first line requires one of ember's modules rather than ember itself (the
# benchmarks' helpers do): the module loads ember, and there is one copy of each
first = script("internal_first.lua", """
local I = require 'ember.internal'
local C = require('ember.runtime') and I.C
print(I == require('ember.internal'), C == ember.C, ember.tensor({1, 2}):sum():item())
""")
expect("a module of ember required before ember", run(first), 0, err="", out="true\ttrue\t3\n")

# ---------------------------------------------------------------- -e, -l, -j, stdin
expect("-e repeated, in order", run("-e", "x = 1", "-e", "x = x * 10", "-e", "print(x)"), 0, out="10\n")
expect("-e then a script sharing globals", run("-e", "greeting = 'hi'",
       script("greet.lua", "print(greeting, ...)\n"), "you"), 0, out="hi\tyou\n")
expect("ember is a lazy global in -e code",
       run("-e", "print(rawget(_G, 'ember') == nil, type(ember.zeros), rawget(_G, 'ember') ~= nil, "
                 "getmetatable(_G) == nil)"), 0, out="true\tfunction\ttrue\ttrue\n")
expect("scripts that never touch ember do not load it",
       run(script("plain.lua", "print(package.loaded.ember == nil, undefined_global == nil)\n")), 0,
       out="true\ttrue\n")
expect("require 'ember' gives the same table as the global",
       run(script("req.lua", "local e = require 'ember'\nprint(e == ember, e.zeros(2, 3):numel())\n")), 0,
       out="true\t6\n")
os.makedirs(os.path.join(TMP, "mods"), exist_ok=True)
script("mods/mymod.lua", "return {x = 5}\n")
expect("-l stores the module in a global",
       run("-l", "mymod", "-e", "print(mymod.x)", env={"LUA_PATH": os.path.join(TMP, "mods", "?.lua") + ";;"}),
       0, out="5\n")
expect("-l unknown module", run("-l", "no_such_mod_xyz"), 1, err_has=("module 'no_such_mod_xyz' not found",))
expect("-j off", run("-j", "off", "-e", "print((jit.status()))"), 0, out="false\n")
expect("-j unknown", run("-jbogus", "-e", "print(1)"), 1, out="", err_has=("unknown -j command 'bogus'",))
expect("- reads the script from stdin", run("-", "p", "q", stdin="print('from stdin', ...)\n"), 0,
       out="from stdin\tp\tq\n")
expect("ember.repl loads (paths set up)", run("-e", "print(type(require('ember.repl').format))"), 0,
       out="function\n")
expect("_EMBER_HOST is the version", run("-e", "io.write(_EMBER_HOST)"), 0, out=version)
expect("ember_yaml preloaded", run("-e", "print(package.preload.ember_yaml ~= nil, "
                                    "require('ember_yaml').load('a: 1').a)"), 0, out="true\t1\n")

# ---------------------------------------------------------------- errors and exit statuses
boom = script("boom.lua", "local function inner()\n  error('boom')\nend\ninner()\n")
expect("script error: message and traceback, status 1", run(boom), 1, out="",
       err_has=(f"ember: {boom}:2: boom", "stack traceback:", "in function 'inner'",
                f"{boom}:4: in main chunk"))
expect("error with a table value", run("-e", "error({})"), 1,
       err_has=("(error object is a table value)", "stack traceback:"))
expect("error with __tostring", run("-e", "error(setmetatable({}, {__tostring = function() return 'custom' end}))"),
       1, err_has=("ember: custom",))
expect("syntax error", run(script("syntax.lua", "x = = 1\n")), 1, out="",
       err_has=("ember: ", "syntax.lua:1:", "unexpected symbol"))
expect("syntax error in -e", run("-e", "x = = 1"), 1, err_has=("(command line):1:",))
expect("missing script", run("no_such_script.lua"), 1, out="",
       err_has=("ember: cannot open no_such_script.lua",))
expect("-e error stops before the script", run("-e", "error('first')", args_lua), 1, out="",
       err_has=("(command line):1: first",))
expect("os.exit(3)", run("-e", "os.exit(3)"), 3)
expect("os.exit(true)", run("-e", "os.exit(true)"), 0)
expect("os.exit(false)", run("-e", "os.exit(false)"), 1)
expect("os.exit runs finalizers", run("-e", "t = setmetatable({}, {__gc = true}) "
       "local p = newproxy(true) getmetatable(p).__gc = function() io.write('finalized\\n') end "
       "keep = p os.exit(0)"), 0, out="finalized\n")

# ---------------------------------------------------------------- threads
expect("--threads N", run("--threads", "3", "-e", "print(ember.C.em_get_num_threads())"), 0, out="3\n")
expect("--threads=N", run("--threads=1", "-e", "print(ember.C.em_get_num_threads())"), 0, out="1\n")
expect("EMBER_NUM_THREADS", run("-e", "print(ember.C.em_get_num_threads())",
                                env={"EMBER_NUM_THREADS": "3"}), 0, out="3\n", err="")
expect("--threads wins over EMBER_NUM_THREADS",
       run("--threads", "2", "-e", "print(ember.C.em_get_num_threads())", env={"EMBER_NUM_THREADS": "3"}),
       0, out="2\n")
expect("bad EMBER_NUM_THREADS warns", run("-e", "print(1)", env={"EMBER_NUM_THREADS": "lots"}), 0,
       out="1\n", err_has=("ignoring EMBER_NUM_THREADS='lots'",))

# ---------------------------------------------------------------- commands
code, facts, _ = run("-e", "local C = ember.C print(ember.ffi.string(C.em_build_features())) "
                           "print(ember.ffi.string(C.em_blas_config())) print(C.em_get_num_threads()) "
                           "print(C.em_device_count(C.EM_CUDA)) print(jit.version)")
features, blas, threads, ncuda, luajit = facts.splitlines()
info_has = [f"ember {version}", f"features:  {features}", f"blas:      {blas}",
            f"threads:   {threads}", "devices:", "cpu:", f"luajit:    {luajit}", "lua path:",
            "/lua/?.lua", "lua cpath:"]
info_has.append("cuda:    none (" if ncuda == "0" else f"cuda:    {ncuda} device")
expect("info", run("info"), 0, err="", out_has=info_has)
# the BLAS kernels: checked on first use, remembered per machine, a failing set replaced
cache = os.path.join(TMP, "cache")
code, core, _ = run("-e", "io.write(ember.ffi.string(ember.C.em_blas_corename()))")
expect("kernels checked", run("info", env={"XDG_CACHE_HOME": cache}), 0, err="",
       out_has=(f"kernels:   {core} kernels, ", "verified (known-answer check passed)"))
check("kernels remembered", os.path.exists(os.path.join(cache, "ember", "blas-verified")))
expect("kernels cached", run("info", env={"XDG_CACHE_HOME": cache}), 0, err="",
       out_has=("verified (known-answer check passed, cached)",))
code, out, err = run("info", env={"XDG_CACHE_HOME": cache, "EMBER_BLAS_TEST_FAULT": core})
expect("failing kernels replaced", (code, out, err), 0,
       err_has=(f"ember: OpenBLAS's {core} kernels failed a known-answer check (a fault simulated",),
       out_has=(f"fallen back from {core}, which failed the known-answer check; verified",))
check("one line of notice", err.count("\n") == 1, err)
expect("kernels unchecked on request", run("info", env={"EMBER_BLAS_VERIFY": "0"}), 0,
       out_has=("not verified (EMBER_BLAS_VERIFY=0)",))
expect("info with --threads", run("--threads", "3", "info"), 0, out_has=("threads:   3",))
# OpenMP's wait policy, and how long ranks spin in shared memory: short beside a runnable task of
# ember's priority that is not part of its job (a nice-0 busy loop that is no sibling of ember's:
# its parent shell exits at once), the user's own choices kept as they are
policy = ("io.write(tostring(os.getenv('OMP_WAIT_POLICY')), ' ', tostring(os.getenv('GOMP_SPINCOUNT')), ' ', "
          "tostring(os.getenv('EMBER_DIST_SPIN_US')))")
saved = {k: os.environ.pop(k) for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "EMBER_DIST_SPIN_US") if k in os.environ}
busy = int(subprocess.run(["sh", "-c", "sh -c 'while :; do :; done' >/dev/null 2>&1 & echo $!"],
                          capture_output=True, text=True).stdout)
try:
    expect("passive beside a busy stranger", run("-e", policy), 0, out="passive nil nil")
finally:
    os.kill(busy, 9)
    os.environ.update(saved)
expect("a user's spin kept", run("-e", policy, env={"EMBER_DIST_SPIN_US": "7", "OMP_WAIT_POLICY": "active"}), 0,
       out="active nil 7")
expect("info takes no arguments", run("info", "extra"), 2, err_has=("unexpected argument 'extra'",))
expect("info refuses -e", run("-e", "print(1)", "info"), 2, out="", err_has=("do not apply",))
expect("run names a missing pipeline file", run("run", "pipelines/x.yaml", "a.b=1"), 2, out="",
       err_has=("ember run: cannot read the pipeline 'pipelines/x.yaml': no such file",))
expect("launch needs -n (tests/distributed/ runs it)", run("launch", "x.lua"), 2, out="",
       err_has=("ember launch: -n N is required",))
script("info", "print('a script named info', ...)\n")
expect("-- info runs a script named info", run("--", "info", "1"), 0, out="a script named info\t1\n")

# ---------------------------------------------------------------- piped REPL and -i
setup = script("setup.lua", "base = 41\nfunction twice(x) return 2 * x end\n")
expect("-i: REPL after the script with its globals, no prompt noise",
       run("-i", setup, stdin="base + 1\ntwice(base)\nprint('hi')\n"), 0, err="",
       out="42\n82\nhi\n")
expect("-e then -i", run("-e", "v = 7", "-i", stdin="v * 6\n"), 0, out="42\n")
expect("-i after a failing script: REPL runs, status stays 1",
       run("-i", script("half.lua", "done_part = 5\nerror('half way')\n"), stdin="done_part * 2\n"), 1,
       out="10\n", err_has=("half.lua:2: half way",))
piped = ("function sq(x)\n  return x * x\nend\nsq(12)\n"
         "{b = 2, a = {1, 2}, [10] = 'x'}\n"
         "1, nil, 'two'\n"
         "local t = {} t.me = t return t\n"
         "error('oops')\n"
         "=6 * 7\n"
         "x = 1 +\n  2\nx\n"
         "ember.zeros(2, 2):numel()\n")
expect("piped REPL: expressions, multi-line, tables, error then continue", run(stdin=piped), 1,
       out='144\n{[10] = "x", a = {1, 2}, b = 2}\n1\tnil\ttwo\n{me = <cycle>}\n42\n3\n4\n',
       err_has=("stdin:1: oops", "stack traceback:"))
expect("piped REPL without errors exits 0", run(stdin="1 + 1\n"), 0, out="2\n", err="")
expect("piped REPL: syntax error reported, then continues", run(stdin="x = = 2\nprint('still here')\n"), 1,
       out="still here\n", err_has=("stdin:1:", "unexpected symbol"))
expect("piped REPL: input ending inside a statement", run(stdin="for i = 1, 2 do\n"), 1,
       err_has=("'end' expected",))
expect("piped REPL: empty input", run(stdin=""), 0, out="", err="")

if failures:
    print(f"\n{len(failures)} failure(s)")
    sys.exit(1)
print("\nall CLI checks passed")
