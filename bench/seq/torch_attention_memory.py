"""PyTorch's side of attention_memory.lua: peak RSS of SDPA forward + backward with
PyTorch's default CPU path (torch.nn.functional.scaled_dot_product_attention) or the
materialised one ('math'). python3 bench/seq/torch_attention_memory.py default|math [T B H D]"""
import json
import math
import resource
import sys

import torch
import torch.nn.functional as F

mode = sys.argv[1] if len(sys.argv) > 1 else "default"
T, B, H, D = (int(a) for a in (sys.argv[2:6] + ["1024", "4", "4", "64"][len(sys.argv[2:6]):]))
torch.manual_seed(0)
q, k, v = (torch.randn(B, H, T, D, requires_grad=True) for _ in range(3))
w = torch.randn(B, H, T, D)
if mode == "default":
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
else:
    s = q @ k.transpose(2, 3) / math.sqrt(D)
    s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    y = s.softmax(-1) @ v
(y * w).sum().backward()
print(json.dumps({"peer": "torch " + torch.__version__, "mode": mode, "T": T, "B": B, "H": H, "D": D,
                  "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
