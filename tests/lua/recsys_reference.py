# recsys_reference.py - the PyTorch numbers embedded in recsys_spec.lua (run: python3
# tests/lua/recsys_reference.py; it prints Lua tables). torch.nn.functional.embedding_bag /
# embedding with sparse=True, torch.optim.SGD / Adagrad over sparse and dense gradients,
# and dlrm_s_pytorch.py's interact_features ('dot'), all in float64. Indices here are
# 0-based; the spec adds 1.
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)
R, D = 8, 3
W0 = torch.tensor([[((i * 7 + j * 3) % 11) / 10 - 0.5 for j in range(D)] for i in range(R)])
IDX = torch.tensor([1, 3, 3, 7, 2, 0, 5])
OFF = torch.tensor([0, 3, 3, 5])
PSW = torch.tensor([0.5, -1, 2, 1.5, 0.25, -0.5, 1])


def cm(b, d):
    return torch.tensor([[(i + 1) * 0.5 - j * 0.25 for j in range(d)] for i in range(b)])


def lua(v):
    if isinstance(v, torch.Tensor):
        v = v.tolist()
    if isinstance(v, list):
        return '{' + ', '.join(lua(x) for x in v) + '}'
    return repr(float(v)) if isinstance(v, float) else str(v)


def out(name, v):
    print(f'  {name} = {lua(v)},')


def bag_case(name, idx, off, mode, psw=None, pad=None, last=False):
    w = W0.clone().requires_grad_()
    p = psw.clone().requires_grad_() if psw is not None else None
    sparse = mode != 'max'  # PyTorch refuses sparse max bags: the dense gradient is compared
    y = F.embedding_bag(idx, w, off, mode=mode, per_sample_weights=p, padding_idx=pad, sparse=sparse,
                        include_last_offset=last)
    (y * cm(*y.shape)).sum().backward()
    out(name + '_out', y)
    if sparse:
        g = w.grad.coalesce()
        out(name + '_rows', g.indices()[0] + 1)
        out(name + '_values', g.values())
    else:
        out(name + '_dense', w.grad)
    if p is not None:
        out(name + '_psw_grad', p.grad)


print('return {')
bag_case('sum', IDX, OFF, 'sum', psw=PSW)
bag_case('mean', IDX, OFF, 'mean')
bag_case('max', IDX, OFF, 'max')
bag_case('pad', IDX, OFF, 'mean', pad=3)
bag_case('last', IDX, torch.tensor([0, 3, 5, 7]), 'sum', last=True)
bag_case('twod', torch.tensor([[1, 2], [3, 3], [0, 7]]), None, 'mean')

w = W0.clone().requires_grad_()
y = F.embedding(torch.tensor([[1, 3], [3, 5]]), w, padding_idx=3, sparse=True)
(y * torch.arange(1.0, 13.0).view(2, 2, 3)).sum().backward()
g = w.grad.coalesce()
out('emb_rows', g.indices()[0] + 1)
out('emb_values', g.values())

w = W0.clone()
with torch.no_grad():
    F.embedding(torch.tensor([1, 3, 3]), w, max_norm=0.3)
out('renorm_weight', w)

# Three steps over the steps' indices: optimizers with sparse (and dense) gradients.
STEPS = [(torch.tensor([1, 3, 3, 7]), torch.tensor([0, 2])), (torch.tensor([0, 3, 6]), torch.tensor([0, 1])),
         (torch.tensor([7, 7, 2]), torch.tensor([0, 2]))]


def train(make, sparse=True):
    emb = torch.nn.EmbeddingBag(R, D, mode='sum', sparse=sparse)
    with torch.no_grad():
        emb.weight.copy_(W0)
    opt = make([emb.weight])
    for idx, off in STEPS:
        opt.zero_grad()
        y = emb(idx, off)
        (y * cm(*y.shape)).sum().backward()
        opt.step()
    return emb.weight.detach(), opt


w, _ = train(lambda p: torch.optim.SGD(p, lr=0.1))
out('sgd_weight', w)
w, opt = train(lambda p: torch.optim.Adagrad(p, lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1, eps=1e-10))
out('adagrad_weight', w)
out('adagrad_sum', opt.state[opt.param_groups[0]['params'][0]]['sum'])
w, _ = train(lambda p: torch.optim.Adagrad(p, lr=0.1, lr_decay=0.01, weight_decay=0.05), sparse=False)
out('adagrad_dense_wd_weight', w)

# DLRM's interaction.
def interact(x, ly, itself):
    (batch_size, d) = x.shape
    T = torch.cat([x] + ly, dim=1).view((batch_size, -1, d))
    Z = torch.bmm(T, torch.transpose(T, 1, 2))
    _, ni, nj = Z.shape
    offset = 1 if itself else 0
    li = torch.tensor([i for i in range(ni) for j in range(i + offset)])
    lj = torch.tensor([j for i in range(nj) for j in range(i + offset)])
    Zflat = Z[:, li, lj]
    return torch.cat([x] + [Zflat], dim=1)


feats = [torch.tensor([[((b * 5 + j * 2 + f * 3) % 7) / 4 - 0.7 for j in range(3)] for b in range(2)])
         for f in range(4)]
for itself in (False, True):
    fs = [f.clone().requires_grad_() for f in feats]
    r = interact(fs[0], fs[1:], itself)
    (r * cm(*r.shape)).sum().backward()
    tag = 'inter_self' if itself else 'inter'
    out(tag + '_out', r)
    out(tag + '_grads', [f.grad for f in fs])
print('}')
