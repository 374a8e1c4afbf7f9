"""What the `ember serve` end-to-end tests share: the ember executable and a scratch folder,
failure bookkeeping, files, ports, running ember, HTTP requests, and the reference forward
written as an ember script (the model's output on each input of a JSON list).

A test calls `setup(prefix)` once, before anything else (it reads the ember path from argv[1])."""
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile

EMBER = None
TMP = None
FAILS = []

# The reference: REFERENCE MODEL CKPT INPUTS OUT writes the forward of each input, one by one.
REFERENCE = """
local ember = require 'ember'
local json = require 'ember.util.json'
local model = require('ember.pipeline.model').from_file(arg[1], {hidden = 16})
model:load_state_dict(ember.load(arg[2]))
model:eval()
local f = io.open(arg[3]); local inputs = json.decode(f:read('*a')); f:close()
local out = {}
for i, x in ipairs(inputs) do
  out[i] = ember.no_grad(function() return model(ember.tensor(x)) end):totable()
end
f = io.open(arg[4], 'w'); f:write(json.encode(out)); f:close()
"""

# A small MLP over the last dimension (any number of positions per instance), and its
# checkpoint: MAKE_CKPT MODEL OUT.
MODEL = """
local nn = require('ember').nn
return function(args)
  return nn.Sequential{ nn.Linear(4, args.hidden), nn.Tanh(), nn.Linear(args.hidden, 3) }
end
"""
MAKE_CKPT = """
local ember = require 'ember'
ember.manual_seed(7)
ember.save(arg[2], require('ember.pipeline.model').from_file(arg[1], {hidden = 16}):state_dict())
"""


def setup(prefix):
    global EMBER, TMP
    EMBER = os.path.abspath(sys.argv[1])
    TMP = tempfile.mkdtemp(prefix=prefix)


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)


def write(name, text):
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ember(*args):
    r = subprocess.run([EMBER, *args], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise SystemExit(f"ember {args} failed: {r.stderr}")
    return r


def request(port, method, path, body=None, timeout=30):
    """(status, text): body may be bytes or str (sent as is), None, or a value sent as JSON."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
    c.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
    r = c.getresponse()
    text = r.read().decode()
    c.close()
    return r.status, text
