#!/usr/bin/python3
"""safetensors interop between ember and NumPy, both ways, with nothing but json + numpy.

  safetensors_interop.py ember-to-python EMBER WORKDIR
      ember writes a file (safetensors_interop.lua write); this script checks the header
      (length, padding, layout, dtypes, shapes, offsets), the metadata and every value.
  safetensors_interop.py python-to-ember EMBER WORKDIR
      this script writes a file the way other writers may (keys in any order, \\u escapes,
      spaces, a header length that leaves the data unaligned); ember loads and checks it
      (safetensors_interop.lua check).

Element i (C order) of each tensor follows value() below, shared with the Lua side.
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
LUA = os.path.join(HERE, "safetensors_interop.lua")

# safetensors code -> (numpy dtype to read the bytes, element size)
CODES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
         "I64": np.int64, "I32": np.int32, "U8": np.uint8, "BOOL": np.bool_}
# The reference writer's layout: descending dtype rank, then name.
RANK = {"BOOL": 0, "U8": 1, "F16": 7, "BF16": 8, "I32": 9, "F32": 11, "F64": 12, "I64": 13}


def value(kind, n):
    i = np.arange(n, dtype=np.int64)
    if kind == "int":
        return i * 1000003 - 7
    if kind == "long":
        return (i - 2) * 3000000000
    if kind == "byte":
        return (i * 7) % 256
    if kind == "bool":
        return i % 3 == 0
    return (i - 3) * 0.25


KIND = {"F64": "float", "F32": "float", "F16": "float", "BF16": "float", "I32": "int", "I64": "long",
        "U8": "byte", "BOOL": "bool"}


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    # Round to nearest even (the values used here are exact in bfloat16 anyway).
    b = np.asarray(x, dtype=np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def run_ember(ember, mode, path):
    proc = subprocess.run([ember, LUA, mode, path], capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        sys.exit(f"ember {mode} failed ({proc.returncode}):\n{proc.stderr}")


def ember_to_python(ember, workdir):
    path = os.path.join(workdir, "from_ember.safetensors")
    run_ember(ember, "write", path)
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0, f"header length {n} is not a multiple of 8"
    text = raw[8:8 + n].decode("utf-8")
    assert text.rstrip(" ") == text.rstrip(), "header is padded with something other than spaces"
    header = json.loads(text)
    data = raw[8 + n:]

    meta = header.pop("__metadata__")
    assert meta == {"framework": "ember", "note": 'caf\u00e9 "quoted"\n'}, meta
    assert list(json.loads(text)).index("__metadata__") == 0, "__metadata__ is not first"

    expected = {
        "f32": ("F32", [2, 3]), "f64.scalar": ("F64", []), "f16": ("F16", [4]), "bf16": ("BF16", [2, 2]),
        "i32": ("I32", [3]), "i64": ("I64", [2, 2]), "u8": ("U8", [5]), "mask": ("BOOL", [2, 3]),
        "empty": ("F32", [0, 4]), 'caf\u00e9 "q"': ("F32", [1]), "transposed": ("F32", [3, 2]),
    }
    assert set(header) == set(expected), sorted(header)
    names = list(header)
    assert names == sorted(names, key=lambda k: (-RANK[header[k]["dtype"]], k.encode())), names

    end = 0
    for name in names:
        info = header[name]
        code, shape = expected[name]
        assert info["dtype"] == code and info["shape"] == shape, (name, info)
        begin, stop = info["data_offsets"]
        assert begin == end, f"{name}: begins at {begin}, previous tensor ended at {end}"
        end = stop
        arr = np.frombuffer(data[begin:stop], dtype=np.dtype(CODES[code]).newbyteorder("<")).reshape(shape)
        if code == "BF16":
            arr = bf16_to_f32(arr)
        want = value(KIND[code], int(np.prod(shape)))
        if name == "transposed":
            want = want.reshape(2, 3).T
        want = np.asarray(want).reshape(shape)
        assert arr.dtype == np.bool_ or arr.dtype.kind in "fiu"
        assert np.array_equal(arr, want.astype(arr.dtype)), f"{name}: {arr} != {want}"
    assert end == len(data), f"tensors cover {end} of {len(data)} data bytes"
    print(f"numpy read the {len(names)} tensors ember wrote")


def python_to_ember(ember, workdir):
    path = os.path.join(workdir, "from_numpy.safetensors")
    tensors = {  # name -> (code, shape); keep in step with the 'check' table in the Lua file
        "u8": ("U8", [2, 2]), "f32": ("F32", [2, 3]), "f64": ("F64", []), "f16": ("F16", [5]),
        "bf16": ("BF16", [3, 2]), "i32": ("I32", [4]), "i64": ("I64", [3]), "mask": ("BOOL", [7]),
        "empty": ("I64", [3, 0]), "\u00e9t\u00e9 \u20ac": ("F32", [2]),
    }
    header, blobs, offset = {}, [], 0
    header["__metadata__"] = {"text": 'tab\there \u2713 "q" \\', "source": "numpy"}
    for name, (code, shape) in tensors.items():   # file order: as listed, not the reference's
        v = value(KIND[code], int(np.prod(shape))).reshape(shape)
        arr = f32_to_bf16(v) if code == "BF16" else np.asarray(v).astype(CODES[code])
        blob = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"shape": shape, "dtype": code, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    # Default json.dumps: ", " and ": " separators and \u escapes for non-ASCII names.
    text = json.dumps(header).encode("ascii")
    while len(text) % 8 != 3:      # misalign the data section on purpose: ember must copy
        text += b" "
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    run_ember(ember, "check", path)


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("ember-to-python", "python-to-ember"):
        sys.exit(__doc__)
    mode, ember, workdir = sys.argv[1:]
    os.makedirs(workdir, exist_ok=True)
    (ember_to_python if mode == "ember-to-python" else python_to_ember)(ember, workdir)


if __name__ == "__main__":
    main()
