#!/usr/bin/env python3
"""`ember kernel` driven by Jupyter's own client (jupyter_client from PyPI).

usage: test_kernel.py EMBER

Installs the kernelspec into a temporary prefix (`ember kernel install --prefix`), starts
the kernel through a KernelManager that finds it on JUPYTER_PATH, and checks the replies of
kernel_info, execute (counts, streams, results, HTML, images, errors, input), complete,
inspect, is_complete, interrupt (SIGINT and the control channel), restart and shutdown; a
message with a bad signature gets no reply (and is logged); a kernel whose client is killed
exits by itself. Exits 77 (skipped) without jupyter_client or without the kernel in this build.
"""
import atexit
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

try:
    import zmq
    from jupyter_client.manager import KernelManager
except ImportError as e:
    print(f"skipped: {e} (pip install jupyter_client)")
    sys.exit(77)

EMBER = os.path.abspath(sys.argv.pop(1))
TMP = tempfile.mkdtemp(prefix="ember-jupyter-")
atexit.register(shutil.rmtree, TMP, ignore_errors=True)
PREFIX = os.path.join(TMP, "prefix")
TIMEOUT = 30


def install():
    p = subprocess.run([EMBER, "kernel", "install", "--prefix", PREFIX], capture_output=True, text=True)
    if p.returncode != 0 and "built without the kernel" in p.stderr:
        print("skipped: this ember has no kernel (ZeroMQ or libcrypto missing)")
        sys.exit(77)
    assert p.returncode == 0, p.stderr
    os.environ["JUPYTER_PATH"] = os.path.join(PREFIX, "share", "jupyter")


class Session:
    """A started kernel and a client, with helpers that collect a request's iopub output."""

    def __init__(self, stderr_path=None):
        self.km = KernelManager(kernel_name="ember")
        self.stderr = open(stderr_path, "w") if stderr_path else None
        self.km.start_kernel(stderr=self.stderr) if self.stderr else self.km.start_kernel()
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=TIMEOUT)
        self.early = {}

    def close(self):
        self.kc.stop_channels()
        if self.km.is_alive():
            self.km.shutdown_kernel(now=False)
        if self.stderr:
            self.stderr.close()

    def outputs(self, msg_id):
        """iopub messages of one request, up to its idle status."""
        out = []
        while True:
            m = self.kc.get_iopub_msg(timeout=TIMEOUT)
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                return out
            out.append(m)

    def reply(self, msg_id, channel="shell"):
        """The reply to msg_id; replies to other requests wait in self.early (an aborted
        request is answered before the failed one that aborted it)."""
        if msg_id in self.early:
            return self.early.pop(msg_id)
        get = self.kc.get_shell_msg if channel == "shell" else self.kc.control_channel.get_msg
        while True:
            m = get(timeout=TIMEOUT)
            if m["parent_header"].get("msg_id") == msg_id:
                return m
            self.early[m["parent_header"].get("msg_id")] = m

    def execute(self, code, **kw):
        msg_id = self.kc.execute(code, **kw)
        reply = self.reply(msg_id)
        return reply["content"], self.outputs(msg_id)


def of_type(outputs, t):
    return [m["content"] for m in outputs if m["msg_type"] == t]


def stream_text(outputs, name):
    return "".join(c["text"] for c in of_type(outputs, "stream") if c["name"] == name)


class KernelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.s = Session(stderr_path=os.path.join(TMP, "kernel.stderr"))

    @classmethod
    def tearDownClass(cls):
        cls.s.close()

    def test_kernelspec(self):
        with open(os.path.join(PREFIX, "share/jupyter/kernels/ember/kernel.json")) as f:
            spec = json.load(f)
        self.assertEqual(spec["argv"], [os.path.realpath(EMBER), "kernel", "-f", "{connection_file}"])
        self.assertEqual(spec["language"], "lua")
        self.assertTrue(spec["display_name"].startswith("ember (LuaJIT"), spec["display_name"])

    def test_kernel_info(self):
        msg_id = self.s.kc.kernel_info()
        c = self.s.reply(msg_id)["content"]
        self.assertEqual(c["status"], "ok")
        self.assertEqual(c["protocol_version"], "5.3")
        self.assertEqual(c["language_info"]["name"], "lua")
        version = subprocess.run([EMBER, "-v"], capture_output=True, text=True).stdout.split()[1]
        self.assertEqual(c["implementation_version"], version)
        self.assertIn("ember " + version, c["banner"])
        self.assertIn("devices:", c["banner"])
        self.assertIn("devices", c["ember"])  # ember info's device line, structured
        self.assertIn("features", c["ember"])

    def test_execute_counts_streams_results(self):
        c1, out = self.s.execute('print("hello"); io.write("w\\n"); io.stderr:write("oops\\n")')
        self.assertEqual(c1["status"], "ok")
        self.assertEqual(stream_text(out, "stdout"), "hello\nw\n")
        self.assertEqual(stream_text(out, "stderr"), "oops\n")
        inputs = of_type(out, "execute_input")
        self.assertEqual(inputs[0]["execution_count"], c1["execution_count"])
        c2, out = self.s.execute("local a = 20\na * 2 + 2")
        self.assertEqual(c2["execution_count"], c1["execution_count"] + 1)
        result = of_type(out, "execute_result")
        self.assertEqual(result[0]["data"]["text/plain"], "42")
        self.assertEqual(result[0]["execution_count"], c2["execution_count"])
        c3, out = self.s.execute("x_silent = 5", silent=True)
        self.assertEqual(c3["execution_count"], c2["execution_count"])  # silent: not counted
        self.assertEqual(of_type(out, "execute_input"), [])
        c, out = self.s.execute("x_silent;")  # a trailing ';' shows nothing
        self.assertEqual(c["status"], "ok")
        self.assertEqual(of_type(out, "execute_result"), [])
        _, out = self.s.execute("x_silent")
        self.assertEqual(of_type(out, "execute_result")[0]["data"]["text/plain"], "5")

    def test_rich_results(self):
        _, out = self.s.execute("ember.arange(12):reshape(3, 4)")
        data = of_type(out, "execute_result")[0]["data"]
        self.assertIn("tensor(", data["text/plain"])
        self.assertIn("<table", data["text/html"])
        self.assertIn("<td>11.0000</td>", data["text/html"])  # float32 0..11, as printed
        # a big tensor is shortened as the printed form: corners and ellipses
        _, out = self.s.execute("ember.zeros(100, 100)")
        html = of_type(out, "execute_result")[0]["data"]["text/html"]
        self.assertIn("&hellip;", html)
        self.assertLess(html.count("<td>"), 100)
        _, out = self.s.execute("ember.nn.Linear(3, 2)")
        html = of_type(out, "execute_result")[0]["data"]["text/html"]
        self.assertIn("weight", html)
        self.assertIn("<td>8</td>", html.replace("<th>", "<td>").replace("</th>", "</td>"))  # 6 + 2 parameters
        _, out = self.s.execute("{{name = 'a', n = 1}, {name = 'b', n = 2}}")
        html = of_type(out, "execute_result")[0]["data"]["text/html"]
        self.assertIn("<th>name</th>", html)
        self.assertIn("<td>b</td>", html)

    def test_images_and_plots(self):
        _, out = self.s.execute("ember.display.image(ember.rand(3, 16, 16))")
        shown = of_type(out, "display_data")
        self.assertEqual(len(shown), 1)
        png = base64.b64decode(shown[0]["data"]["image/png"])
        self.assertEqual(png[:8], b"\x89PNG\r\n\x1a\n")
        _, out = self.s.execute("ember.plot.line({1, 10, 100}, {ylog = true, title = 't'})")
        data = of_type(out, "execute_result")[0]["data"]
        self.assertEqual(base64.b64decode(data["image/png"])[:4], b"\x89PNG")
        _, out = self.s.execute("ember.plot.hist(ember.randn(500)):show()")
        self.assertEqual(len(of_type(out, "display_data")), 1)

    def test_errors(self):
        c, out = self.s.execute('local function f() error("boom") end\nf()')
        self.assertEqual(c["status"], "error")
        self.assertEqual(c["ename"], "LuaError")
        self.assertIn("boom", c["evalue"])
        tb = "\n".join(c["traceback"])
        self.assertIn("In[", tb)  # the cell's own frames
        self.assertNotIn("kernel/cell.lua", tb)  # not the kernel's
        self.assertEqual(of_type(out, "error")[0]["ename"], "LuaError")
        c, _ = self.s.execute("x = = 1")
        self.assertEqual(c["status"], "error")
        self.assertEqual(c["ename"], "SyntaxError")
        c, _ = self.s.execute("1 + 1")  # the kernel carries on
        self.assertEqual(c["status"], "ok")

    def test_user_expressions(self):
        c, _ = self.s.execute("ue = 6", user_expressions={"a": "ue * 7", "b": "nosuch.field"})
        ue = c["user_expressions"]
        self.assertEqual(ue["a"]["data"]["text/plain"], "42")
        self.assertEqual(ue["b"]["status"], "error")

    def test_input(self):
        msg_id = self.s.kc.execute('local s = io.read()\nprint("got " .. s)', allow_stdin=True)
        req = self.s.kc.get_stdin_msg(timeout=TIMEOUT)
        self.assertEqual(req["msg_type"], "input_request")
        self.s.kc.input("abc")
        self.assertEqual(self.s.reply(msg_id)["content"]["status"], "ok")
        self.assertEqual(stream_text(self.s.outputs(msg_id), "stdout"), "got abc\n")

    def test_complete(self):
        def complete(code, cursor=None):
            msg_id = self.s.kc.complete(code, len(code) if cursor is None else cursor)
            return self.s.reply(msg_id)["content"]

        c = complete("ember.ra")
        self.assertIn("ember.randn", c["matches"])
        self.assertEqual((c["cursor_start"], c["cursor_end"]), (0, 8))
        c = complete("local s = string.fo")
        self.assertEqual(c["matches"], ["string.format"])
        self.assertEqual(c["cursor_start"], len("local s = "))
        self.s.execute("tt = ember.zeros(2, 2)")
        self.assertIn("tt:reshape", complete("tt:resh")["matches"])
        c = complete("é = ember.ra")  # cursor_pos counts characters, not bytes
        self.assertEqual(c["cursor_start"], 4)
        self.assertIn("ember.randn", c["matches"])

    def test_inspect(self):
        def inspect(code, cursor=None):
            msg_id = self.s.kc.inspect(code, len(code) if cursor is None else cursor)
            return self.s.reply(msg_id)["content"]

        c = inspect("ember.arange")
        self.assertTrue(c["found"])
        text = c["data"]["text/plain"]
        self.assertIn("ember.arange(", text)
        self.assertIn("arange(end)", text)  # the doc line above its definition
        c = inspect("ember.nn.Linear(3, ", 16)
        self.assertIn("in_features, out_features", c["data"]["text/plain"])
        self.assertFalse(inspect("no_such_name_here")["found"])
        _, out = self.s.execute("?ember.arange")  # ?name as in the REPL
        self.assertIn("ember.arange(", stream_text(out, "stdout"))

    def test_is_complete(self):
        def status(code):
            return self.s.reply(self.s.kc.is_complete(code))["content"]

        self.assertEqual(status("for i = 1, 3 do")["status"], "incomplete")
        self.assertEqual(status("for i = 1, 3 do")["indent"], "  ")
        self.assertEqual(status("x = {1,")["status"], "incomplete")
        self.assertEqual(status("x = 1")["status"], "complete")
        self.assertEqual(status("x = = 1")["status"], "invalid")

    def interrupted_loop(self, interrupt):
        msg_id = self.s.kc.execute("spins = 0\nwhile true do spins = spins + 1 end")
        time.sleep(1.0)
        interrupt()
        c = self.s.reply(msg_id)["content"]
        self.assertEqual(c["status"], "error")
        self.assertEqual(c["ename"], "Interrupted")
        c, out = self.s.execute("spins > 0")
        self.assertEqual(c["status"], "ok", c)
        self.assertEqual(of_type(out, "execute_result")[0]["data"]["text/plain"], "true")

    def test_interrupt_signal(self):
        self.interrupted_loop(self.s.km.interrupt_kernel)  # the kernelspec says SIGINT

    def test_interrupt_message(self):
        def by_message():
            msg = self.s.kc.session.msg("interrupt_request", {})
            self.s.kc.control_channel.send(msg)
            self.by_message_reply = self.s.reply(msg["header"]["msg_id"], channel="control")

        self.interrupted_loop(by_message)
        self.assertEqual(self.by_message_reply["content"]["status"], "ok")

    def test_stop_on_error_aborts_queued(self):
        # the second request arrives while the first still runs
        first = self.s.kc.execute('local t = os.clock()\nwhile os.clock() - t < 0.5 do end\nerror("first")')
        second = self.s.kc.execute("queued_ran = true")
        self.assertEqual(self.s.reply(first)["content"]["status"], "error")
        self.assertEqual(self.s.reply(second)["content"]["status"], "aborted")
        _, out = self.s.execute("queued_ran == nil")
        self.assertEqual(of_type(out, "execute_result")[0]["data"]["text/plain"], "true")

    def test_heartbeat(self):
        """The heartbeat echoes what it gets, also while a cell runs."""
        ci = self.s.km.get_connection_info()
        sock = zmq.Context.instance().socket(zmq.REQ)
        sock.connect(f"{ci['transport']}://{ci['ip']}:{ci['hb_port']}")
        msg_id = self.s.kc.execute("local t = os.clock()\nwhile os.clock() - t < 1 do end")
        for payload in (b"ping", b"\x00\xffbinary"):
            sock.send(payload)
            self.assertEqual(sock.poll(5000), zmq.POLLIN)
            self.assertEqual(sock.recv(), payload)
        sock.close(0)
        self.assertEqual(self.s.reply(msg_id)["content"]["status"], "ok")
        self.assertTrue(self.s.kc.hb_channel.is_beating())

    def test_zz_bad_signature(self):
        """A message signed with another key gets no reply and is logged; the kernel lives on."""
        ci = self.s.km.get_connection_info()
        ctx = zmq.Context.instance()
        sock = ctx.socket(zmq.DEALER)
        sock.connect(f"{ci['transport']}://{ci['ip']}:{ci['shell_port']}")
        header = json.dumps({"msg_id": "forged-1", "session": "x", "username": "x", "date": "2026-01-01T00:00:00Z",
                             "msg_type": "execute_request", "version": "5.3"}).encode()
        content = json.dumps({"code": "forged = true", "silent": False}).encode()
        frames = [header, b"{}", b"{}", content]
        sock.send_multipart([b"<IDS|MSG>", b"0" * 64] + frames)
        sock.send_multipart([b"<IDS|MSG>", b"not-even-hex"] + frames)
        self.assertEqual(sock.poll(2000), 0, "the kernel answered a forged message")
        sock.close(0)
        _, out = self.s.execute("forged == nil")
        self.assertEqual(of_type(out, "execute_result")[0]["data"]["text/plain"], "true")
        with open(os.path.join(TMP, "kernel.stderr")) as f:
            self.assertIn("bad signature", f.read())


class LifecycleTest(unittest.TestCase):
    def test_restart_and_shutdown(self):
        s = Session()
        try:
            s.execute("kept = 1")
            pid = s.km.provisioner.process.pid
            s.km.restart_kernel(now=False)
            s.kc.wait_for_ready(timeout=TIMEOUT)
            self.assertNotEqual(s.km.provisioner.process.pid, pid)
            c, out = s.execute("kept == nil")
            self.assertEqual(c["execution_count"], 1)  # a fresh kernel
            self.assertEqual(of_type(out, "execute_result")[0]["data"]["text/plain"], "true")
            # pictures and a display before leaving: in the sanitizer build, exit status 0 also
            # says that nothing leaked
            c, _ = s.execute("ember.plot.line({1, 2}):show()\nember.display.image(ember.rand(4, 4))")
            self.assertEqual(c["status"], "ok")
            proc = s.km.provisioner.process
            s.km.shutdown_kernel(now=False)
            self.assertFalse(s.km.is_alive())
            self.assertEqual(proc.wait(timeout=10), 0)  # it exited by itself, not killed
        finally:
            s.close()

    def test_orphaned_kernel_exits(self):
        """The client process is killed (SIGKILL: no shutdown message): the kernel goes too."""
        driver = (
            "import sys, time\n"
            "from jupyter_client.manager import KernelManager\n"
            "km = KernelManager(kernel_name='ember'); km.start_kernel()\n"
            "kc = km.client(); kc.start_channels(); kc.wait_for_ready(timeout=30)\n"
            "print(km.provisioner.process.pid, flush=True)\n"
            "time.sleep(300)\n"
        )
        p = subprocess.Popen([sys.executable, "-c", driver], stdout=subprocess.PIPE, text=True)
        try:
            kernel_pid = int(p.stdout.readline())
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()
            p.stdout.close()
        deadline = time.time() + 15
        while time.time() < deadline and alive(kernel_pid):
            time.sleep(0.2)
        self.assertFalse(alive(kernel_pid), "the orphaned kernel is still running")


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


if __name__ == "__main__":
    install()
    unittest.main(verbosity=2)
