#!/usr/bin/env python3
"""Writes tests/lua/seq_fixtures.lua: PyTorch's outputs and gradients for the sequence
layers, which tests/lua/seq_spec.lua and seq_attention_spec.lua compare ember against.

Run from the repository root: python3 tests/lua/gen_seq_fixtures.py (PyTorch from PyPI,
CPU). Every case is float64 with deterministic inputs and parameters (sines and cosines of
the element index), so the fixture only has to carry them along with the expected values.
Each case records: parameters by their PyTorch names (loaded into ember's module through
its state dict names), inputs, the weights w_i of the loss sum_i sum(out_i * w_i), the
outputs, and the gradients of that loss with respect to every input and parameter.
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


def pattern(shape, seed, scale=0.5):
    n = math.prod(shape) if len(shape) else 1
    vals = [scale * math.sin(1.3 * i + 0.7 * seed + 0.1) for i in range(n)]
    return torch.tensor(vals).reshape(shape)


def weights_for(outs, seed):
    return [torch.cos(0.37 * torch.arange(o.numel()) + seed).reshape(o.shape) for o in outs]


def set_params(module):
    for k, (_, p) in enumerate(module.named_parameters()):
        with torch.no_grad():
            p.copy_(pattern(list(p.shape), 10 + k, 0.4))


def lua_number(v):
    if math.isinf(v):
        return "math.huge" if v > 0 else "-math.huge"
    return "%.17g" % v


def lua_tensor(t):
    t = t.detach().to(torch.float64)
    shape = ", ".join(str(s) for s in t.shape)
    data = ", ".join(lua_number(v) for v in t.reshape(-1).tolist())
    return "{ shape = {%s}, data = {%s} }" % (shape, data)


def lua_bool_tensor(t):
    shape = ", ".join(str(s) for s in t.shape)
    data = ", ".join("true" if v else "false" for v in t.reshape(-1).tolist())
    return "{ shape = {%s}, bool = {%s} }" % (shape, data)


def run_case(module, inputs, forward, seed=1):
    """inputs: name -> tensor (float tensors get grads). forward(module, inputs) -> list."""
    if module is not None:
        set_params(module)
    leaves = {}
    for name, t in inputs.items():
        if t.is_floating_point():
            t = t.clone().requires_grad_(True)
        leaves[name] = t
    outs = forward(module, leaves)
    ws = weights_for(outs, seed)
    loss = sum((o * w).sum() for o, w in zip(outs, ws))
    loss.backward()
    case = {"inputs": {}, "bool_inputs": {}, "params": {}, "grads": {}}
    for name, t in leaves.items():
        if t.dtype == torch.bool:
            case["bool_inputs"][name] = t
        else:
            case["inputs"][name] = t
            if t.grad is not None:
                case["grads"][name] = t.grad
    if module is not None:
        for name, p in module.named_parameters():
            case["params"][name] = p
            case["grads"][name] = p.grad
    case["weights"] = ws
    case["outputs"] = outs
    return case


def emit(name, case, out):
    out.append("  %s = {" % name)
    for key in ("inputs", "params", "grads"):
        out.append("    %s = {" % key)
        for k, t in case[key].items():
            out.append('      ["%s"] = %s,' % (k, lua_tensor(t)))
        out.append("    },")
    out.append("    bool_inputs = {")
    for k, t in case["bool_inputs"].items():
        out.append('      ["%s"] = %s,' % (k, lua_bool_tensor(t)))
    out.append("    },")
    for key in ("weights", "outputs"):
        out.append("    %s = {" % key)
        for t in case[key]:
            out.append("      %s," % lua_tensor(t))
        out.append("    },")
    out.append("  },")


def rnn_forward(lengths=None, batch_first=False, lstm=False):
    def fwd(m, inp):
        x = inp["x"]
        hx = None
        if "h0" in inp:
            hx = (inp["h0"], inp["c0"]) if lstm else inp["h0"]
        if lengths is not None:
            packed = nn.utils.rnn.pack_padded_sequence(x, torch.tensor(lengths), batch_first=batch_first,
                                                       enforce_sorted=False)
            y, st = m(packed, hx)
            y, _ = nn.utils.rnn.pad_packed_sequence(y, batch_first=batch_first,
                                                    total_length=x.shape[1 if batch_first else 0])
        else:
            y, st = m(x, hx)
        return [y, st[0], st[1]] if lstm else [y, st]
    return fwd


def main():
    torch.manual_seed(0)
    cases = []
    # ---- recurrent layers
    cases.append(("lstm_2layer", run_case(nn.LSTM(3, 4, num_layers=2),
        {"x": pattern([4, 2, 3], 1), "h0": pattern([2, 2, 4], 2), "c0": pattern([2, 2, 4], 3)},
        rnn_forward(lstm=True))))
    cases.append(("lstm_bidir_lengths", run_case(nn.LSTM(3, 3, bidirectional=True, batch_first=True),
        {"x": pattern([3, 4, 3], 4)}, rnn_forward(lengths=[4, 2, 1], batch_first=True, lstm=True))))
    cases.append(("gru_2layer_lengths", run_case(nn.GRU(3, 4, num_layers=2),
        {"x": pattern([4, 2, 3], 5), "h0": pattern([2, 2, 4], 6)}, rnn_forward(lengths=[3, 4]))))
    cases.append(("rnn_relu_nobias", run_case(nn.RNN(3, 4, nonlinearity="relu", bias=False),
        {"x": pattern([5, 2, 3], 7, 1.0), "h0": pattern([1, 2, 4], 8)}, rnn_forward())))
    cases.append(("rnn_tanh_bidir", run_case(nn.RNN(2, 3, bidirectional=True),
        {"x": pattern([3, 2, 2], 9), "h0": pattern([2, 2, 3], 10)}, rnn_forward())))
    cases.append(("lstm_cell", run_case(nn.LSTMCell(3, 4),
        {"x": pattern([2, 3], 11), "h": pattern([2, 4], 12), "c": pattern([2, 4], 13)},
        lambda m, i: list(m(i["x"], (i["h"], i["c"]))))))
    cases.append(("gru_cell", run_case(nn.GRUCell(3, 4),
        {"x": pattern([2, 3], 14), "h": pattern([2, 4], 15)}, lambda m, i: [m(i["x"], i["h"])])))
    cases.append(("rnn_cell", run_case(nn.RNNCell(3, 4),
        {"x": pattern([2, 3], 16), "h": pattern([2, 4], 17)}, lambda m, i: [m(i["x"], i["h"])])))
    # ---- attention
    qkv = {"q": pattern([2, 2, 5, 4], 20, 1.0), "k": pattern([2, 2, 6, 4], 21, 1.0), "v": pattern([2, 2, 6, 3], 22)}
    cases.append(("sdpa_float_mask", run_case(None, dict(qkv, mask=pattern([5, 6], 23, 2.0)),
        lambda m, i: [F.scaled_dot_product_attention(i["q"], i["k"], i["v"], attn_mask=i["mask"].detach())])))
    bmask = (torch.arange(2 * 5 * 6).reshape(2, 1, 5, 6) % 3 != 0)
    cases.append(("sdpa_bool_mask_scale", run_case(None, dict(qkv, mask=bmask),
        lambda m, i: [F.scaled_dot_product_attention(i["q"], i["k"], i["v"], attn_mask=i["mask"], scale=0.3)])))
    sq = {"q": pattern([2, 5, 4], 24, 1.0), "k": pattern([2, 5, 4], 25, 1.0), "v": pattern([2, 5, 4], 26)}
    cases.append(("sdpa_causal_3d", run_case(None, sq,
        lambda m, i: [F.scaled_dot_product_attention(i["q"], i["k"], i["v"], is_causal=True)])))
    kpm = torch.tensor([[False, False, False, True, True], [False, False, False, False, False]])
    cases.append(("mha_self_kpm_weights", run_case(nn.MultiheadAttention(8, 2),
        {"x": pattern([5, 2, 8], 27, 1.0), "kpm": kpm},
        lambda m, i: list(m(i["x"], i["x"], i["x"], key_padding_mask=i["kpm"])))))
    cases.append(("mha_cross_batch_first", run_case(nn.MultiheadAttention(8, 4, batch_first=True),
        {"q": pattern([2, 3, 8], 28, 1.0), "kv": pattern([2, 6, 8], 29, 1.0)},
        lambda m, i: [m(i["q"], i["kv"], i["kv"], need_weights=False)[0]])))
    causal = torch.triu(torch.full((5, 5), float("-inf")), diagonal=1)
    cases.append(("encoder_post_relu", run_case(
        nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0),
        {"x": pattern([5, 2, 8], 30, 1.0), "mask": causal},
        lambda m, i: [m(i["x"], src_mask=i["mask"].detach())])))
    cases.append(("encoder_pre_gelu", run_case(
        nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, activation="gelu", norm_first=True,
                                   batch_first=True),
        {"x": pattern([2, 5, 8], 31, 1.0), "kpm": kpm},
        lambda m, i: [m(i["x"], src_key_padding_mask=i["kpm"])])))
    cases.append(("rms_norm", run_case(nn.RMSNorm([4]), {"x": pattern([3, 4], 32, 1.0)}, lambda m, i: [m(i["x"])])))
    cases.append(("gelu_tanh", run_case(None, {"x": pattern([7], 33, 3.0)},
        lambda m, i: [F.gelu(i["x"], approximate="tanh")])))
    cases.append(("conv1d", run_case(nn.Conv1d(3, 4, 3, stride=2, padding=1), {"x": pattern([2, 3, 7], 34, 1.0)},
        lambda m, i: [m(i["x"])])))

    out = ["-- Generated by tests/lua/gen_seq_fixtures.py with PyTorch %s (float64, CPU): do not edit." % torch.__version__,
           "-- Each case: inputs, params (PyTorch names), weights w_i of the loss sum_i sum(out_i * w_i),",
           "-- the outputs and the loss's gradients.", "return {"]
    for name, case in cases:
        emit(name, case, out)
    # ---- RMSprop trajectories: four steps from the same start with fixed gradients
    for name, kw in [("rmsprop_plain", dict(lr=0.01)),
                     ("rmsprop_centered_momentum_wd", dict(lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.1,
                                                           momentum=0.8, centered=True))]:
        p = pattern([5], 40, 1.0).clone().requires_grad_(True)
        opt = torch.optim.RMSprop([p], **kw)
        start = p.detach().clone()
        grads, traj = [], []
        for t in range(4):
            g = pattern([5], 41 + t, 1.0)
            p.grad = g.clone()
            opt.step()
            grads.append(g)
            traj.append(p.detach().clone())
        out.append("  %s = { start = %s, grads = { %s }, params = { %s } }," % (
            name, lua_tensor(start), ", ".join(lua_tensor(g) for g in grads), ", ".join(lua_tensor(t) for t in traj)))
    out.append("}")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seq_fixtures.lua")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    print("wrote", path, file=sys.stderr)


if __name__ == "__main__":
    main()
