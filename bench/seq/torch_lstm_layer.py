"""PyTorch's side of lstm_layer.lua (same shapes, same median over the same steps).
python3 bench/seq/torch_lstm_layer.py [steps T B H threads]"""
import sys
import time

import torch

a = sys.argv[1:] + [None] * 5
N, T, B, H = (int(v) if v else d for v, d in zip(a[:4], (20, 50, 50, 128)))
if a[4]:
    torch.set_num_threads(int(a[4]))
torch.manual_seed(0)
lstm = torch.nn.LSTM(65, H, num_layers=2)
x = torch.randn(T, B, 65)
times = []
for i in range(N + 1):
    t0 = time.perf_counter()
    y, _ = lstm(x)
    y.sum().backward()
    lstm.zero_grad(set_to_none=True)
    if i > 0:
        times.append((time.perf_counter() - t0) * 1e3)
times.sort()
print('{"impl": "torch %s", "T": %d, "B": %d, "H": %d, "threads": %d, "median_ms": %.2f}' % (
    torch.__version__, T, B, H, torch.get_num_threads(), times[(len(times) - 1) // 2]))
