#!/usr/bin/env python3
"""tests/distributed/store_interop.py EMBER - ember's c10d TCPStore (ember.dist.Store,
runtime/distributed/store*.c) speaks PyTorch's protocol both ways:
  - ember hosts the server, torch.distributed.TCPStore is the client: set/get/add/check,
    compare_set, multi_get/multi_set, append, delete, num_keys, queues, a wait that times out
    (torch's CANCEL_WAIT) and a wait that ember's side completes;
  - torch hosts the server, ember's client: set/get/add/check/wait (and its timeout)/delete,
    with a value larger than one read.
Exits 77 (skipped) when torch is not installed."""
import datetime
import os
import subprocess
import sys
import time

try:
    from torch.distributed import TCPStore
except ImportError:
    print("torch not installed: skipped")
    sys.exit(77)

EMBER = sys.argv[1]
failures = []


def check(name, cond, detail=""):
    print(f"{'ok  ' if cond else 'FAIL'} {name}" + (f": {detail}" if detail and not cond else ""))
    if not cond:
        failures.append(name)


# ---- ember's server, torch's client
EMBER_SERVER = r"""
local s = ember.dist.Store{server = true, port = 0, timeout = 20}
io.stdout:write('port ', s:port(), '\n'); io.stdout:flush()
assert(s:get('from_torch') == 'hello ember', 'the value torch set')
s:set('from_ember', 'hello torch')
s:wait({'torch_done'}, 20)
assert(s:get('counter') == '7', 'the counter torch added to: ' .. s:get('counter'))
assert(s:get('app') == 'abcd', 'the appended value')
print('ember server: ok')
"""
p = subprocess.Popen([EMBER, "-e", EMBER_SERVER], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
line = p.stdout.readline()
check("ember's server starts", line.startswith("port "), line)
port = int(line.split()[1])
t = TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=10))
t.set("from_torch", "hello ember")
check("torch gets what ember set", t.get("from_ember") == b"hello torch")
check("torch add", t.add("counter", 5) == 5 and t.add("counter", 2) == 7)
check("torch check", t.check(["from_ember", "counter"]) and not t.check(["from_ember", "nope"]))
check("torch compare_set (absent, expected empty)", t.compare_set("cs", "", "first") == b"first")
check("torch compare_set (match)", t.compare_set("cs", "first", "second") == b"second")
check("torch compare_set (mismatch)", t.compare_set("cs", "zzz", "third") == b"second")
t.multi_set(["m1", "m2"], ["a", "bb"])
check("torch multi_get", t.multi_get(["m1", "m2"]) == [b"a", b"bb"])
t.append("app", "ab")
t.append("app", "cd")
check("torch delete", t.delete_key("m1") and not t.delete_key("m1"))
n = t.num_keys()
check("torch num_keys", n >= 6, str(n))
t.queue_push("q", b"x1")
t.queue_push("q", b"x2")
check("torch queue_len", t.queue_len("q") == 2)
check("torch queue_pop", t.queue_pop("q") == b"x1" and t.queue_pop("q") == b"x2")
t0 = time.monotonic()
try:
    t.wait(["never"], datetime.timedelta(seconds=0.5))
    check("torch wait times out", False, "no timeout")
except Exception as e:  # noqa: BLE001
    check("torch wait times out", "timeout" in str(e).lower() and time.monotonic() - t0 < 5, str(e))
check("torch after a cancelled wait", t.get("from_ember") == b"hello torch")
t.set("torch_done", "1")
out, _ = p.communicate(timeout=30)
check("ember's server saw torch's writes", p.returncode == 0 and "ember server: ok" in out, out)

# ---- torch's server, ember's client
server = TCPStore("127.0.0.1", 0, is_master=True, timeout=datetime.timedelta(seconds=20), wait_for_workers=False)
server.set("from_torch", "x" * 10000)
EMBER_CLIENT = r"""
local s = ember.dist.Store{host = '127.0.0.1', port = tonumber(os.getenv('STORE_PORT')), timeout = 20}
assert(s:get('from_torch') == string.rep('x', 10000), 'the large value')
s:set('from_ember', 'ember was here')
assert(s:add('n', 40) == 40 and s:add('n', 2) == 42)
assert(s:check{'from_torch', 'n'} and not s:check{'from_torch', 'missing'})
local t0 = os.clock()
local ok, err = pcall(function() s:wait({'missing'}, 0.5) end)
assert(not ok and err:find('timed out after 0.5 s', 1, true), tostring(err))
assert(s:get('from_torch'):sub(1, 3) == 'xxx', 'the stream is in step after the timeout')
s:wait({'later'}, 20) -- python sets it once it has read from_ember
assert(s:get('later') == 'now')
assert(s:delete('n') and not s:check{'n'})
print('ember client: ok')
"""
p = subprocess.Popen([EMBER, "-e", EMBER_CLIENT], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                     env=dict(os.environ, STORE_PORT=str(server.port)))
check("torch gets what ember's client set", server.get("from_ember") == b"ember was here")
server.set("later", "now")
out, _ = p.communicate(timeout=30)
check("ember's client against torch's server", p.returncode == 0 and "ember client: ok" in out, out)
check("torch sees ember's add", server.check(["from_ember"]) and not server.check(["n"]))
sys.exit(1 if failures else 0)
