#!/usr/bin/env python3
"""`cmake --install` into a temporary prefix, then the installed ember used from another folder,
as a user would: a script, the REPL banner in a terminal, `require 'ember'` from a stock luajit,
a C program built with pkg-config against the installed headers and library, and (with Open MPI)
`ember launch`, which needs the MPI plugin beside the installed libember. Each check also asserts
that what ran came from the prefix, not from the build or source tree.

usage: test_install.py BUILD_DIR [--preload LIBASAN]
  --preload: the sanitizer build's ASan runtime, preloaded into the processes that are not the
             ember executable (stock luajit, the C program), as tests/extra.cmake does for ctypes.
"""
import argparse
import os
import pty
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("build")
ap.add_argument("--preload")
opts = ap.parse_args()
BUILD = os.path.abspath(opts.build)
TMP = tempfile.mkdtemp(prefix="ember-install-")
PREFIX = os.path.join(TMP, "prefix")
WORK = os.path.join(TMP, "work")        # the folder every check runs in: neither source nor build
os.makedirs(WORK)
failures = []


def check(name, cond, detail=""):
    print(("ok   " if cond else "FAIL ") + name)
    if not cond:
        failures.append(name)
        if detail:
            print("     " + detail.replace("\n", "\n     "))


def run(cmd, env=None, preload=False, timeout=120, stdin=None):
    full = dict(os.environ)
    full.setdefault("EMBER_NUM_THREADS", "2")
    full.update(env or {})
    if preload and opts.preload:
        full["LD_PRELOAD"] = opts.preload
        full["ASAN_OPTIONS"] = "detect_leaks=0"
    p = subprocess.run(cmd, cwd=WORK, env=full, capture_output=True, text=True, timeout=timeout,
                       input=stdin)
    return p.returncode, p.stdout, p.stderr


def under_prefix(path):
    return os.path.realpath(path).startswith(os.path.realpath(PREFIX) + os.sep)


def write(name, text):
    path = os.path.join(WORK, name)
    with open(path, "w") as f:
        f.write(text)
    return path


# Lua that reports where the ember library and libember came from (/proc/self/maps).
WHERE = r"""
local function mapped(name)
  for line in io.lines('/proc/self/maps') do
    local path = line:match('%s(/%S*/' .. name .. ')$')
    if path then return path end
  end
  return 'none'
end
print('module ' .. package.searchpath('ember', package.path))
print('libember ' .. mapped('libember.so'))
"""

# ---------------------------------------------------------------- install
rc, out, err = run(["cmake", "--install", BUILD, "--prefix", PREFIX])
check("cmake --install", rc == 0, out + err)
if rc != 0:
    sys.exit(1)
EXE = os.path.join(PREFIX, "bin", "ember")
expected = ["bin/ember", "lib/libember.so", "include/ember/core.h", "include/ember/tensor.h",
            "lib/pkgconfig/ember.pc", "share/lua/5.1/ember/init.lua", "share/lua/5.1/ember/cdefs.lua",
            "share/ember/pipelines/fashion_mnist_mlp.yaml"]
for plugin in ("libember_mpi.so", "libember_cuda.so"):   # built plugins sit next to libember
    if os.path.exists(os.path.join(BUILD, plugin)):
        expected.append("lib/" + plugin)
if os.path.exists(os.path.join(BUILD, "ember_yaml.so")):
    expected.append("lib/lua/5.1/ember_yaml.so")
missing = [f for f in expected if not os.path.exists(os.path.join(PREFIX, f))]
check("installed files", not missing, "missing: " + ", ".join(missing))

# ---------------------------------------------------------------- a script from another folder
script = write("hello.lua", WHERE + """
local x = ember.arange(1, 5):view(2, 2)
print('sum ' .. x:matmul(x):sum():item())
print('arg ' .. table.concat(arg, ','))
""")
rc, out, err = run([EXE, script, "a", "b"])
check("installed ember runs a script", rc == 0 and "sum 54" in out and "arg a,b" in out, out + err)
m = re.search(r"^module (\S+)", out, re.M)
check("  its Lua library is the installed one", m is not None and under_prefix(m.group(1)), out)
m = re.search(r"^libember (\S+)", out, re.M)
check("  its libember is the installed one", m is not None and under_prefix(m.group(1)), out)

rc, out, err = run([EXE, os.path.join(PREFIX, "share", "ember", "examples", "tensors.lua")])
check("installed ember runs the installed examples/tensors.lua", rc == 0 and "equal:\ttrue" in out, out + err)

rc, out, err = run([EXE, "info"])
check("installed ember info", rc == 0 and re.search(r"^lua path:\s+" + re.escape(PREFIX), out, re.M) is not None,
      out + err)

# ---------------------------------------------------------------- the REPL in a terminal
def repl_session(lines, timeout=30):
    """Runs the installed ember on a pseudo-terminal, typing lines then Ctrl-D; returns (status, screen)."""
    master, slave = pty.openpty()
    env = dict(os.environ, EMBER_NUM_THREADS="2", EMBER_HISTORY="", TERM="dumb")
    p = subprocess.Popen([EXE], cwd=WORK, env=env, stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    screen, deadline = b"", time.time() + timeout
    pending = [l.encode() + b"\r" for l in lines] + [b"\x04"]

    def read_some(wait):
        nonlocal screen
        r, _, _ = select.select([master], [], [], wait)
        if r:
            try:
                chunk = os.read(master, 4096)
            except OSError:   # the child closed the terminal
                return False
            if not chunk:
                return False
            screen += chunk
        return True

    while time.time() < deadline:
        if pending and screen.rstrip().endswith(b">"):   # a prompt: type the next line
            os.write(master, pending.pop(0))
            time.sleep(0.05)
        if not read_some(0.1) or p.poll() is not None:
            while read_some(0.1):
                pass
            break
    status = p.wait(timeout=5) if p.poll() is None else p.returncode
    os.close(master)
    return status, screen.decode(errors="replace")


status, screen = repl_session(["x = ember.ones(3):sum():item()", "print('three is ' .. x)"])
check("installed REPL banner", re.search(r"^ember \d+\.\d+\.\d+ \| LuaJIT", screen, re.M) is not None, screen)
check("installed REPL evaluates and exits 0 on Ctrl-D", status == 0 and "three is 3" in screen, screen)

# ---------------------------------------------------------------- stock luajit
luajit = shutil.which("luajit")
if luajit:
    share, clib = os.path.join(PREFIX, "share/lua/5.1"), os.path.join(PREFIX, "lib/lua/5.1")
    env = {"LUA_PATH": f"{share}/?.lua;{share}/?/init.lua;;", "LUA_CPATH": f"{clib}/?.so;;"}
    code = "ember = require 'ember'\n" + WHERE + """
print('sum ' .. ember.ones(2, 3):sum():item())
local ok = pcall(require, 'ember_yaml')
print('yaml ' .. tostring(ok))
"""
    rc, out, err = run([luajit, "-e", code], env=env, preload=True)
    check("stock luajit: require 'ember' from the prefix", rc == 0 and "sum 6" in out, out + err)
    m = re.search(r"^libember (\S+)", out, re.M)
    check("  finds the installed libember unaided", m is not None and under_prefix(m.group(1)), out)
    if "lib/lua/5.1/ember_yaml.so" in expected:
        check("  and the installed ember_yaml C module", "yaml true" in out, out)
else:
    print("skip stock luajit: not found")

# ---------------------------------------------------------------- a C program, through pkg-config
cc, pkgconfig = shutil.which("cc"), shutil.which("pkg-config")
if cc and pkgconfig:
    env = {"PKG_CONFIG_PATH": os.path.join(PREFIX, "lib", "pkgconfig")}
    rc, flags, err = run([pkgconfig, "--cflags", "--libs", "ember"], env=env)
    check("pkg-config --cflags --libs ember", rc == 0 and f"-I{PREFIX}/include" in flags and "-lember" in flags,
          flags + err)
    rc, libdir, err = run([pkgconfig, "--variable=libdir", "ember"], env=env)
    src = write("matmul.c", r"""
#include <ember/tensor.h>
#include <stdio.h>

/* [[1, 2], [3, 4]] @ [[1, 2], [3, 4]] summed: 7 + 10 + 15 + 22 = 54 */
int main(void) {
  em_tensor *a = NULL, *v = NULL, *p = NULL, *s = NULL;
  int64_t sizes[2] = {2, 2};
  double sum = 0;
  em_device cpu = {0};
  if (em_arange(&a, 1, 5, 1, EM_FLOAT64, cpu) || em_view(&v, a, 2, sizes) || em_matmul(&p, v, v) ||
      em_reduce(EM_SUM, &s, NULL, p, NULL, 0, 0, 0) || em_tensor_item(s, &sum)) {
    fprintf(stderr, "error: %s\n", em_last_error());
    return 1;
  }
  printf("ember %s: sum %g\n", em_version(), sum);
  em_tensor_release(s);
  em_tensor_release(p);
  em_tensor_release(v);
  em_tensor_release(a);
  return 0;
}
""")
    exe = os.path.join(WORK, "matmul")
    cmd = [cc, "-std=c11", "-Wall", "-Werror", src, "-o", exe, *flags.split(), "-Wl,-rpath," + libdir.strip()]
    if opts.preload:
        cmd.append("-fsanitize=address")   # the instrumented libember needs the ASan runtime first
    rc, out, err = run(cmd)
    check("C program compiles against the installed headers", rc == 0, " ".join(cmd) + "\n" + out + err)
    if rc == 0:
        rc, out, err = run([exe], preload=True)
        check("C program runs against the installed libember", rc == 0 and "sum 54" in out, out + err)
else:
    print("skip C program: cc or pkg-config not found")

# ---------------------------------------------------------------- ember launch: the MPI plugin
if "lib/libember_mpi.so" in expected and shutil.which("mpirun"):
    script = write("ranks.lua", r"""
ember.dist.init { timeout = 30 }
local t = ember.tensor({ ember.dist.rank() + 1 })
ember.dist.all_reduce(t, 'sum')
local plugin = 'none'
for line in io.lines('/proc/self/maps') do plugin = line:match('%s(/%S*/libember_mpi%.so)$') or plugin end
print(string.format('rank %d of %d: sum %g plugin %s', ember.dist.rank(), ember.dist.world_size(), t:item(), plugin))
""")
    env = {"ASAN_OPTIONS": "detect_leaks=0"} if opts.preload else None
    rc, out, err = run([EXE, "launch", "-n", "2", "--threads", "1", script], env=env)
    sums = re.findall(r"rank \d of 2: sum 3 plugin (\S+)", out)
    check("installed ember launch -n 2 (all_reduce through the MPI plugin)", rc == 0 and len(sums) == 2,
          out + err)
    check("  the MPI plugin is the one beside the installed libember", sums and all(map(under_prefix, sums)), out)
else:
    print("skip ember launch: no MPI plugin or mpirun")

shutil.rmtree(TMP, ignore_errors=True)
if failures:
    print(f"{len(failures)} check(s) failed: " + "; ".join(failures))
    sys.exit(1)
print("all install checks passed")
