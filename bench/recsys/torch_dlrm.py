"""bench/recsys/torch_dlrm.py - PyTorch running DLRM's own DLRM_Net (dlrm_s_pytorch.py) on
DLRM's random data (dlrm_data_pytorch.generate_uniform_input_batch), SGD, BCE on sigmoid
outputs as DLRM's --loss-function=bce; prints one JSON line: samples/s (first steps excluded)
and peak RSS. Under torchrun it runs DLRM's data-parallel mode (DDP over Gloo, the tables
replicated with sparse gradients, as dlrm_s_pytorch.py without model parallelism).
  python3 torch_dlrm.py DLRM_DIR --steps 50 --batch 128 --rows 100000 --threads 1 [--config kaggle|benchmark]
--config benchmark: DLRM's bench/dlrm_s_benchmark.sh model (512 dense inputs, bottom
512-512-64, top 1024-1024-1024-1, dimension 64, 8 tables, up to 100 indices per bag drawn as
its random data does); kaggle (default): the Criteo Kaggle model, 26 tables, 1 index per bag.
"""
import argparse, json, os, resource, sys, time

ap = argparse.ArgumentParser()
ap.add_argument('dlrm_dir')
ap.add_argument('--steps', type=int, default=50)
ap.add_argument('--warmup', type=int, default=5)
ap.add_argument('--batch', type=int, default=128)
ap.add_argument('--rows', type=int, default=100000)
ap.add_argument('--tables', type=int, default=None)
ap.add_argument('--lookups', type=int, default=None)
ap.add_argument('--config', choices=('kaggle', 'benchmark'), default='kaggle')
ap.add_argument('--threads', type=int, default=1)
a = ap.parse_args()
sys.path.insert(0, a.dlrm_dir)
sys.argv = sys.argv[:1]
import numpy as np
import torch
torch.set_num_threads(a.threads)
import dlrm_s_pytorch as D   # DLRM's own model code
import dlrm_data_pytorch as dp

world = int(os.environ.get('WORLD_SIZE', '1'))
rank = int(os.environ.get('RANK', '0'))
if world > 1:
    torch.distributed.init_process_group('gloo')
np.random.seed(1 + rank)
if a.config == 'kaggle':
    dim, bot, top, fixed = 16, [13, 512, 256, 64, 16], [512, 256, 1], True
    a.tables, a.lookups = a.tables or 26, a.lookups or 1
else:
    dim, bot, top, fixed = 64, [512, 512, 64], [1024, 1024, 1024, 1], False
    a.tables, a.lookups = a.tables or 8, a.lookups or 100
ln_emb = np.array([a.rows] * a.tables)
# top input: the bottom output and the dot products of distinct pairs of the tables + 1
# vectors (16 + 27 * 26 / 2 = 367 for Kaggle), as DLRM computes it
n = a.tables + 1
net = D.DLRM_Net(dim, ln_emb, np.array(bot), np.array([dim + n * (n - 1) // 2] + top),
                 arch_interaction_op='dot', arch_interaction_itself=False, sigmoid_bot=-1, sigmoid_top=len(top) - 1)
if world > 1:
    net = torch.nn.parallel.DistributedDataParallel(net)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
loss_fn = torch.nn.BCELoss()
batches = []
for _ in range(8):
    X, lS_o, lS_i = dp.generate_uniform_input_batch(bot[0], ln_emb, a.batch, a.lookups, fixed, False)
    T = torch.tensor(np.random.randint(0, 2, (a.batch, 1)).astype(np.float32))
    batches.append((X, lS_o, lS_i, T))
t0 = None
for step in range(a.warmup + a.steps):
    if step == a.warmup:
        t0, c0 = time.perf_counter(), time.process_time()
    X, lS_o, lS_i, T = batches[step % len(batches)]
    opt.zero_grad()
    loss = loss_fn(net(X, lS_o, lS_i).clamp(1e-7, 1 - 1e-7), T)
    loss.backward()
    opt.step()
dt, cpu = time.perf_counter() - t0, time.process_time() - c0
if rank == 0:
    print(json.dumps({'peer': 'pytorch ' + torch.__version__ + ' dlrm_s_pytorch.DLRM_Net', 'config': a.config,
                      'ranks': world,
                      'samples_per_s': a.steps * a.batch * world / dt,
                      'samples_per_cpu_s': a.steps * a.batch / cpu,
                      'peak_rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
