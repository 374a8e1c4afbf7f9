"""TorchServe handler for bench/serve/compare.sh: the KServe v2 JSON request ember serve takes
({"inputs": [{"name", "shape": [n, 1, 28, 28], "datatype": "FP32", "data": [...]}]}), one
forward per batch TorchServe forms, the KServe v2 JSON answer (the 10 logits per image), so
that both servers get the same bytes and parse the same JSON."""
import json
import os

import torch


class Handler:
    def __init__(self):
        self.model = None

    def initialize(self, context):
        torch.set_num_threads(1)  # one core per worker, as ember's workers (threads: 1)
        d = context.system_properties.get("model_dir")
        self.model = torch.jit.load(os.path.join(d, "model.pt"))
        self.model.eval()
        self.name = context.manifest["model"]["modelName"]

    def handle(self, data, context):
        xs, rows = [], []
        for req in data:
            body = req.get("body") or req.get("data")
            if isinstance(body, (bytes, bytearray)):
                body = json.loads(body)
            inp = body["inputs"][0]
            xs.append(torch.tensor(inp["data"], dtype=torch.float32).reshape(inp["shape"]))
            rows.append(inp["shape"][0])
        with torch.no_grad():
            out = self.model(torch.cat(xs))
        answers, r0 = [], 0
        for n in rows:
            y = out[r0:r0 + n]
            r0 += n
            answers.append({"model_name": self.name, "outputs": [
                {"name": "logits", "datatype": "FP32", "shape": list(y.shape), "data": y.flatten().tolist()}]})
        return answers


_service = Handler()


def handle(data, context):
    if _service.model is None:
        _service.initialize(context)
    if data is None:
        return None
    return _service.handle(data, context)
