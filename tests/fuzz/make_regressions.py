#!/usr/bin/env python3
"""Writes the inputs built from each crash class fixed in the parsers into
tests/fuzz/regressions/<harness>/ (inputs the fuzzers found are copied there as they are).
    python3 tests/fuzz/make_regressions.py     (after make_seeds.py: some start from seeds)"""
import os, struct, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_seeds import frames, hdr, npy, split, tdesc  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, 'regressions')


def put(harness, name, data):
    d = os.path.join(OUT, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data.encode() if isinstance(data, str) else data)


def seed(harness, name):
    with open(os.path.join(HERE, 'seeds', harness, name), 'rb') as f:
        return bytearray(f.read())


def npy_header(descr, shape):  # a header with no data after it
    text = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (descr, ', '.join(map(str, shape)))
    pad = 64 - (10 + len(text) + 1) % 64
    return b'\x93NUMPY\x01\x00' + struct.pack('<H', len(text) + pad + 1) + text.encode() + b' ' * pad + b'\n'


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def mask(c):
    return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xFFFFFFFF


def tfrecord(*records):
    out = b''
    for r in records:
        n = struct.pack('<Q', len(r))
        out += n + struct.pack('<I', mask(crc32c(n))) + r + struct.pack('<I', mask(crc32c(r)))
    return out


def pb(field, data):  # a length-delimited protobuf field (short lengths only)
    n, v = len(data), b''
    while True:
        v += bytes([(n & 0x7f) | (0x80 if n > 0x7f else 0)])
        n >>= 7
        if not n:
            break
    return bytes([field << 3 | 2]) + v + data


def example(image, label=1):
    feature = pb(1, pb(1, image))  # bytes_list { value: image }
    number = pb(3, pb(1, bytes([label])))  # int64_list { value: [label] } (packed)
    return pb(1, pb(1, pb(1, b'image') + pb(2, feature)) + pb(1, pb(1, b'label') + pb(2, number)))


def emg_section(b, i):  # (offset, count) of the i-th section of an .emg file
    off, count = struct.unpack_from('<QQ', b, 88 + 32 * i + 8)
    return off, count


def main():
    # ---- .emg: structure behind valid checksums (the harness recomputes them)
    for base in ('degree.emg', 'none.emg'):
        g = seed('emg', base)
        tag = base.split('.')[0]
        b = bytearray(g); off, _ = emg_section(b, 0); struct.pack_into('<q', b, off + 8, 5)
        put('emg', tag + '_offsets_decrease', b)
        b = bytearray(g); off, _ = emg_section(b, 1); struct.pack_into('<I', b, off + 4, 1000)
        put('emg', tag + '_source_out_of_range', b)
        b = bytearray(g); off, _ = emg_section(b, 2); struct.pack_into('<I', b, off, 77)
        put('emg', tag + '_out_degree_wrong', b)
        b = bytearray(g); struct.pack_into('<q', b, 40, 1 << 62); struct.pack_into('<Q', b, 88 + 32 + 16, 1 << 62)
        put('emg', tag + '_count_wraps', b)
    b = seed('emg', 'degree.emg'); off, _ = emg_section(b, 3); b[off:off + 4] = b[off + 4:off + 8]
    put('emg', 'to_dense_not_permutation', b)
    b = seed('emg', 'degree.emg'); off, _ = emg_section(b, 4); struct.pack_into('<I', b, off, 99)
    put('emg', 'to_internal_out_of_range', b)
    b = seed('emg', 'degree.emg'); off, _ = emg_section(b, 6); struct.pack_into('<q', b, off + 8, 1 << 40)
    put('emg', 'label_offset_past_data', b)
    b = seed('emg', 'degree.emg'); off, n = emg_section(b, 7); b[off:off + n] = b'x' * n
    put('emg', 'label_without_nul', b)
    # ---- .npy and the npy source: zero and overflowing dims
    put('npy', 'overflow_2e32x2e32', npy_header('|u1', (1 << 32, 1 << 32, 1, 1)))
    put('npy', 'zero_beside_huge', npy_header('<f4', (0, 1 << 40, 1 << 40)))
    put('npy_source', 'zero_channels', split(npy_header('|u1', (4, 0, 28, 28)), b''))
    put('npy_source', 'zero_channels_last', split(npy_header('|u1', (4, 28, 28, 0)), b''))
    put('npy_source', 'overflow_2e32x2e32', split(npy_header('|u1', (1 << 32, 1 << 32, 1, 1)), b''))
    put('npy_source', 'huge_samples_no_bytes', split(npy_header('<f4', (1 << 40, 0)), b''))
    put('npy_source', 'width_past_int', split(npy_header('|u1', (0, 1, (1 << 32) + 1)), b''))
    # ---- JPEG: tables-only, truncated with a huge frame
    put('jpeg', 'soi_eoi', b'\xff\xd8\xff\xd9')
    rgb = seed('jpeg', 'rgb.jpg')
    sof = rgb.find(b'\xff\xc0')
    sos = rgb.find(b'\xff\xda')
    big = bytearray(rgb); struct.pack_into('>HH', big, sof + 5, 20000, 20000)
    big = bytes(big[:sos + 20])  # the header and a few bytes of scan: 632 bytes "decoded" to 2.4 GB
    put('jpeg', 'truncated_20000x20000', big)
    put('jpeg', 'truncated', bytes(rgb[:sos + 20]))
    put('jpeg', 'tables_only', bytes(rgb[:sof]) + b'\xff\xd9')
    # ---- TFRecord records carrying those JPEGs
    put('tfrecord', 'tables_only_jpeg', tfrecord(example(b'\xff\xd8\xff\xd9')))
    put('tfrecord', 'truncated_huge_jpeg', tfrecord(example(big)))
    # ---- YAML: aliases of aliases
    lol = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for i, k in enumerate('bcdefghi'):
        prev = 'abcdefgh'[i]
        lol += '%s: &%s [%s]\n' % (k, k, ','.join(['*' + prev] * 9))
    put('yaml', 'billion_laughs', lol)
    put('yaml', 'self_alias', 'a: &a [*a, *a]\n')
    # ---- sizes taken on trust
    put('mtx', 'rows_4e9', '%%MatrixMarket matrix coordinate pattern general\n4000000000 4000000000 1\n1 2\n')
    put('mtx', 'entries_2e64', '%%MatrixMarket matrix coordinate pattern general\n3 3 18446744073709551615\n1 2\n')
    put('idx', 'dims_2e31_no_data', bytes([0, 0, 8, 3, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0x10, 0, 0, 0, 0x10, 0]))
    put('idx', 'zero_beside_2e31', bytes([0, 0, 8, 3, 0, 0, 0, 0, 0x80, 0, 0, 0, 0x80, 0, 0, 0]))
    put('idx', 'zero_beside_huge', bytes([0, 0, 8, 3, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]))
    put('snap', 'one_edge_huge_id', '0 3000000000\n')
    # ---- data pipeline messages
    put('wire_lease', 'lease_count_wraps', frames(hdr('LEASE', session=7, plan=1, n=1 << 61), b''))
    put('wire_lease', 'slots_count_wraps', frames(hdr('SLOTS', n=1 << 62), b''))
    hello = b'x' * 272
    put('wire_hello', 'unterminated_strings', frames(b'Dr', hdr('HELLO'), hello, b'fp'))
    ids = struct.pack('<2q', 10, 12)
    descs = tdesc('x', 6, [2, 0, 1 << 40, 1 << 40], 0, 0)
    put('wire_batch', 'zero_beside_huge', frames(b'Dr', hdr('BATCH', session=7, plan=1, n=2, ntensors=1), descs, ids,
                                                 b''))
    b = bytearray(hdr('BATCH', session=7, plan=1, n=2, ntensors=1)); struct.pack_into('<q', b, 64, (1 << 63) - 1)
    put('wire_batch', 'skipped_huge', frames(b'Dr', bytes(b), tdesc('x', 6, [2], 0, 2), ids, b'\1\2'))
    put('wire_ring', 'frame_past_entry', struct.pack('<5I', 4, 120, 0xffffff00, 16, 16) + b'\0' * 64)


if __name__ == '__main__':
    main()
