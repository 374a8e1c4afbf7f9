"""bench/recsys/auc_torch.py - DLRM's own DLRM_Net (dlrm_s_pytorch.py) trained on the batches
bench/recsys/auc_data.lua wrote from pipelines/dlrm_synthetic.yaml (the same samples in the
same order as `ember run` trains on), as dlrm_s_pytorch.py trains: BCELoss on the sigmoid
output, torch.optim.SGD over all parameters (sparse embedding gradients); then ROC AUC on
the test part with sklearn.metrics.roc_auc_score, as DLRM's inference does. One JSON line.
  python3 auc_torch.py DLRM_DIR DATA.safetensors --bot 13-64-16 --top 64-32-1 --lr 0.1 \
      --rows 1000 --seed 0 --threads 2
"""
import argparse, json, sys, time

ap = argparse.ArgumentParser()
ap.add_argument('dlrm_dir')
ap.add_argument('data')
ap.add_argument('--bot', default='13-64-16')
ap.add_argument('--top', default='64-32-1')
ap.add_argument('--rows', default='1000', help='rows per table: one number or dash-separated, one per table')
ap.add_argument('--lr', type=float, default=0.1)
ap.add_argument('--seed', type=int, default=0)
ap.add_argument('--threads', type=int, default=2)
a = ap.parse_args()
sys.path.insert(0, a.dlrm_dir)
sys.argv = sys.argv[:1]
import numpy as np
import torch
from safetensors.numpy import load_file
import sklearn.metrics
import dlrm_s_pytorch as D   # DLRM's own model code

torch.set_num_threads(a.threads)
np.random.seed(a.seed)       # DLRM_Net draws its initial weights from numpy
torch.manual_seed(a.seed)
d = load_file(a.data)
ntab = len([k for k in d if k.startswith('train.t') and k.endswith('.lengths')])
rows = [int(x) for x in a.rows.split('-')]
ln_emb = np.array(rows * ntab if len(rows) == 1 else rows)
m = int(a.bot.split('-')[-1])
ln_bot = np.array([int(x) for x in a.bot.split('-')])
num_int = m + (ntab + 1) * ntab // 2        # dot interaction, distinct pairs: as DLRM computes it
ln_top = np.array([num_int] + [int(x) for x in a.top.split('-')])
net = D.DLRM_Net(m, ln_emb, ln_bot, ln_top, arch_interaction_op='dot', arch_interaction_itself=False,
                 sigmoid_bot=-1, sigmoid_top=len(ln_top) - 2, loss_function='bce')
opt = torch.optim.SGD(net.parameters(), lr=a.lr)


def batches(prefix):
    """(X, lS_o, lS_i, T) per batch in DLRM's input format."""
    dense, label, sizes = d[prefix + '.dense'], d[prefix + '.label'], d[prefix + '.batch']
    lens = [d[f'{prefix}.t{j}.lengths'] for j in range(1, ntab + 1)]
    vals = [d[f'{prefix}.t{j}.values'] for j in range(1, ntab + 1)]
    vpos = [0] * ntab
    s = 0
    for b in sizes:
        lS_o, lS_i = [], []
        for j in range(ntab):
            ln = lens[j][s:s + b]
            n = int(ln.sum())
            lS_o.append(torch.tensor(np.concatenate([[0], np.cumsum(ln)[:-1]])))
            lS_i.append(torch.tensor(vals[j][vpos[j]:vpos[j] + n]))
            vpos[j] += n
        yield (torch.tensor(dense[s:s + b]), torch.stack(lS_o), lS_i, torch.tensor(label[s:s + b]).view(-1, 1))
        s += b


t0 = time.perf_counter()
steps = 0
for X, lS_o, lS_i, T in batches('train'):
    Z = net(X, lS_o, lS_i)
    E = net.loss_fn(Z, T)
    opt.zero_grad()
    E.backward()
    opt.step()
    steps += 1
train_s = time.perf_counter() - t0
preds, labels = [], []
with torch.no_grad():
    for X, lS_o, lS_i, T in batches('test'):
        preds.append(net(X, lS_o, lS_i).view(-1).numpy())
        labels.append(T.view(-1).numpy())
p, y = np.concatenate(preds), np.concatenate(labels)
print(json.dumps({'peer': 'pytorch ' + torch.__version__ + ' dlrm_s_pytorch.DLRM_Net', 'steps': steps,
                  'test_roc_auc': float(sklearn.metrics.roc_auc_score(y, p)),
                  'test_log_loss': float(sklearn.metrics.log_loss(y, p.astype(np.float64))),
                  'train_seconds': train_s}))
