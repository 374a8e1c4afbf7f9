#!/usr/bin/env python3
"""Writes the fuzz harnesses' seed corpora (tests/fuzz/seeds/<harness>/): a few small valid
inputs each. The committed seeds came from this script; run it again after a format change:
    python3 tests/fuzz/make_seeds.py build/ember
JPEG, TFRecord, .emg and safetensors files are written by ember itself (its Lua API)."""
import gzip, os, struct, subprocess, sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'seeds')
EMBER = sys.argv[1] if len(sys.argv) > 1 else 'build/ember'


def put(harness, name, data):
    d = os.path.join(ROOT, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data.encode() if isinstance(data, str) else data)


def npy(descr, shape, values):  # NumPy's .npy 1.0 layout, C order
    text = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, ''.join('%d, ' % d for d in shape) if len(shape) == 1 else ', '.join(map(str, shape)))
    pad = 64 - (10 + len(text) + 1) % 64
    code = {'|u1': 'B', '<f4': 'f', '<i8': 'q'}[descr]
    return (b'\x93NUMPY\x01\x00' + struct.pack('<H', len(text) + pad + 1) + text.encode() + b' ' * pad + b'\n' +
            struct.pack('<%d%s' % (len(values), code), *values))


def split(a, b):  # fuzz.h fz_split: a 2-byte length, then two parts
    return struct.pack('<H', len(a)) + a + b


def frames(*fs):  # fuzz_wire.h fz_frames: 2-byte lengths, the last frame takes the rest
    return b''.join(struct.pack('<H', len(f)) + f for f in fs[:-1]) + fs[-1]


# dp_hdr (runtime/data/pipeline/wire.h): 120 bytes
KIND = dict(HELLO=1, LEASE=5, BATCH=6, SLOTS=11)
def hdr(kind, session=0, plan=0, item=0, n=0, ntensors=0, flags=0):
    return struct.pack('<IHHIiQQQqqQq4d2d', 0x50444d45, 5, KIND[kind], flags, ntensors, session, plan, 0, item, n,
                       0, 0, 0, 0, 0, 0, 0, 0)


def tdesc(name, dtype, sizes, offset, nbytes, lengths=0):  # em_tensor_desc + offset + nbytes: 128 bytes
    s = list(sizes) + [0] * (8 - len(sizes))
    return struct.pack('<32sii8qiiqq', name.encode(), dtype, len(sizes), *s, lengths, 0, offset, nbytes)


# ember serve's binary protocol (runtime/serve/wire.c): header 32 bytes + the model name
def sv_hdr(model, ntensors, kind=1, request_id=1):
    return struct.pack('<IHHQqHHI', 0x56534D45, 1, kind, request_id, 0, 0, len(model), ntensors) + model


def sv_tensor(name, code, shape, data):  # desc frame, data frame
    return [struct.pack('<BBHI', code, len(shape), len(name), 0) + struct.pack('<%dq' % len(shape), *shape) + name, data]


def serve_wire_seeds():  # fuzz_serve_wire.c: model m, inputs x float32 [-1, 4] and ids int64 [2]
    x = sv_tensor(b'x', 1, [1, 2, 4], struct.pack('<8f', *range(8)))
    ids = sv_tensor(b'ids', 4, [1, 2], struct.pack('<2q', 3, 4))
    put('serve_wire', 'infer', frames(sv_hdr(b'm', 2), *x, *ids))
    put('serve_wire', 'infer_3rows', frames(sv_hdr(b'm', 2), *sv_tensor(b'x', 1, [3, 1, 4], bytes(48)),
                                            *sv_tensor(b'ids', 4, [3, 2], bytes(48))))
    put('serve_wire', 'wrong_shape', frames(sv_hdr(b'm', 2), *sv_tensor(b'x', 1, [1, 2, 5], bytes(40)), *ids))
    put('serve_wire', 'unknown_model', frames(sv_hdr(b'zz', 1), *x))
    put('serve_wire', 'header_only', sv_hdr(b'm', 0))


def main():
    serve_wire_seeds()
    # ---- JSON
    put('json', 'header.json', '{"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, "__metadata__": {}}')
    put('json', 'values.json', '[1, -2, 3.5e2, "a\\u00e9\\n", true, false, null, {"k": [[]]}, 9223372036854775807]')
    # ---- IDX (MNIST layout), plain and gzipped
    images = bytes([0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 2]) + bytes(range(12))
    put('idx', 'images.idx', images)
    put('idx', 'images.idx.gz', gzip.compress(images, mtime=0))
    put('idx', 'labels.idx', bytes([0, 0, 8, 1, 0, 0, 0, 3, 1, 2, 3]))
    put('idx', 'int32.idx', bytes([0, 0, 0x0C, 1, 0, 0, 0, 2, 0, 0, 0, 7, 255, 255, 255, 255]))
    # ---- npy and the npy source
    put('npy', 'u1_3d.npy', npy('|u1', (3, 2, 2), range(12)))
    put('npy', 'f4_2d.npy', npy('<f4', (2, 3), [1.0] * 6))
    put('npy', 'i8_1d.npy', npy('<i8', (3,), [1, 2, 3]))
    put('npy_source', 'images_labels', split(npy('|u1', (3, 2, 2), range(12)),
                                             npy('<i8', (3,), [0, 1, 2])))
    put('npy_source', 'chw', split(npy('|u1', (2, 2, 2, 2), range(16)), b''))
    put('npy_source', 'raw_f4', split(npy('<f4', (3, 4), [1.0] * 12), npy('|u1', (3,), [1, 0, 1])))
    # ---- graphs
    put('snap', 'small.snap', '# a comment\n0 1\n1 2\n2 0\n2 3\n')
    put('snap', 'sparse.snap', '100 7\n7 100\n100 3000000000\n5 7\n')
    put('snap', 'weighted.snap', '# u v weight\n0 1 0.5\n1 2 2\n2 0 1e-3\n2 2 0\n0 1 1.5\n3 0 7 1700000000\n')
    put('mtx', 'general.mtx', '%%MatrixMarket matrix coordinate real general\n3 3 3\n1 2 0.5\n2 3 1\n3 1 2e3\n')
    put('mtx', 'integer.mtx', '%%MatrixMarket matrix coordinate integer symmetric\n4 4 3\n2 1 3\n3 3 1\n4 2 0\n')
    put('mtx', 'symmetric.mtx', '%%MatrixMarket matrix coordinate pattern symmetric\n% c\n3 3 2\n2 1\n3 2\n')
    off, nb = [0, 2, 3, 3], [1, 2, 2]
    sg = struct.pack('<?qq', True, 3, 3) + struct.pack('<4q', *off) + struct.pack('<3i', *nb)
    put('sg', 'directed.sg', sg + struct.pack('<4q', 0, 0, 1, 3) + struct.pack('<3i', 0, 0, 1))
    put('sg', 'undirected.sg', struct.pack('<?qq', False, 2, 2) + struct.pack('<3q', 0, 1, 2) + struct.pack('<2i', 1, 0))
    put('labels', 'names.txt', '# id name\n7 seven\n100 one hundred\n3000000000 three billion\n')
    # ---- YAML pipeline files
    for name in sorted(os.listdir('pipelines')):
        if not name.endswith('.yaml'):
            continue
        with open(os.path.join('pipelines', name), 'rb') as f:
            put('yaml', name, f.read())
    put('yaml', 'anchors.yaml', 'job: pagerank\nbase: &b {damping: 0.85}\ngraph:\n  kronecker: {scale: 4}\nx: *b\n')
    # ---- data pipeline messages (fuzz_wire.h: session 7, plan 1, item 0 holds ids 10..17)
    hello = struct.pack('<qqQ64s40s64s64sQQ', 1234, 8, 99, b'host', b'boot', b'reader', b'', 0, 0)
    put('wire_hello', 'hello', frames(b'Dreader', hdr('HELLO'), hello, b'fingerprint: npy x.npy'))
    put('wire_lease', 'lease', frames(hdr('LEASE', session=7, plan=1, n=3), struct.pack('<3q', 0, 1, 3)))
    put('wire_lease', 'lease_slots', frames(hdr('LEASE', session=7, plan=1, n=1), struct.pack('<q', 2),
                                            struct.pack('<2q', 0, 1)))
    put('wire_lease', 'slots', frames(hdr('SLOTS', n=2), struct.pack('<2q', 4, 5)))
    ids = struct.pack('<2q', 10, 12)
    data = bytes(range(8)) + bytes(56) + struct.pack('<2q', 1, 0)
    descs = tdesc('x', 6, [2, 2, 2], 0, 8) + tdesc('y', 5, [2], 64, 16)
    batch = [hdr('BATCH', session=7, plan=1, n=2, ntensors=2), descs, ids, data]
    put('wire_batch', 'batch', frames(b'Dreader', *batch))
    entry = struct.pack('<5I', 4, *[len(f) for f in batch]) + b''.join(f + bytes(-len(f) % 8) for f in batch)
    put('wire_ring', 'notice', entry)
    lease = [hdr('LEASE', session=7, plan=1, n=3), struct.pack('<3q', 0, 1, 3), struct.pack('<2q', 0, 1)]
    put('wire_ring', 'lease', struct.pack('<5I', 3, *[len(f) for f in lease], 0) +
        b''.join(f + bytes(-len(f) % 8) for f in lease))
    # ---- written by ember: JPEG, TFRecord, .emg, safetensors
    lua = r'''
local ember = require 'ember'
local data, graph = require 'ember.data', require 'ember.graph'
local out = ...
local function put(h, name, bytes)
  os.execute('mkdir -p ' .. out .. '/' .. h)
  local f = assert(io.open(out .. '/' .. h .. '/' .. name, 'wb')); f:write(bytes); f:close()
end
local function read(path) local f = assert(io.open(path, 'rb')); local s = f:read('*a'); f:close(); return s end
local rgb = ember.arange(0, 4 * 4 * 3):reshape(4, 4, 3):to('uint8')
local gray = ember.arange(0, 8 * 8):reshape(8, 8):to('uint8')
local j1, j2 = data.jpeg.encode(rgb, 75), data.jpeg.encode(gray, 90)
put('jpeg', 'rgb.jpg', j1); put('jpeg', 'gray.jpg', j2)
local tmp = os.tmpname()
data.tfrecord.write(tmp, { data.tfrecord.example { image = j2, label = 3 }, data.tfrecord.example { image = j1, label = 1 } })
put('tfrecord', 'jpeg.tfrecord', read(tmp))
data.tfrecord.write(tmp, { data.tfrecord.example { image = '\1\2\3\4', label = 0 } })
put('tfrecord', 'raw.tfrecord', read(tmp))
for _, reorder in ipairs { 'none', 'degree' } do
  local g = graph.load(out .. '/snap/sparse.snap', { reorder = reorder, progress = false })
  g:load_labels(out .. '/labels/names.txt')
  g:save(tmp); put('emg', reorder .. '.emg', read(tmp))
  g = graph.load(out .. '/snap/weighted.snap', { reorder = reorder, progress = false })
  g:save(tmp); put('emg', 'weighted_' .. reorder .. '.emg', read(tmp))
end
ember.save(tmp, { w = ember.ones(2, 3), b = ember.arange(0, 4):to('int64') })
put('safetensors', 'two.safetensors', read(tmp))
os.remove(tmp)
'''
    subprocess.run([EMBER, '-e', 'arg = {...}', '-', ROOT], input=lua.encode(), check=True)


if __name__ == '__main__':
    main()
