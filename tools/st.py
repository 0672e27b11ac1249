"""Minimal pure-Python safetensors reader/writer (numpy, optionally torch).

The PyPI `safetensors` package is not needed: this module reads and writes the same
format and lays files out byte for byte as `safetensors.torch.save_file` does (header
{"__metadata__" first, then tensors in data order, keys dtype/shape/data_offsets}, compact
JSON, padded with spaces to a multiple of 8; data ordered by dtype, largest first, then by
name).

    import st
    tensors, metadata = st.load_file("x.safetensors")          # dict name -> torch.Tensor
    arrays, metadata = st.load_file("x.safetensors", "np")     # numpy (no BF16)
    st.save_file({"a": torch.zeros(2, 3)}, "y.safetensors", metadata={"format": "pt"})

Command line:
    python3 st.py dump FILE                # header summary
    python3 st.py copy SRC DST             # load then save (round trip)
"""
import json
import os
import struct
import sys

import numpy as np

try:
    import torch
except ImportError:  # numpy-only use
    torch = None

MAX_HEADER = 100 * 1024 * 1024

# Format dtype -> (numpy dtype or None, bytes, rank in the reference writer's Dtype enum)
_DTYPES = {
    "BOOL": (np.bool_, 1, 0),
    "U8": (np.uint8, 1, 4),
    "I8": (np.int8, 1, 5),
    "I16": (np.int16, 2, 9),
    "U16": (np.uint16, 2, 10),
    "F16": (np.float16, 2, 11),
    "BF16": (None, 2, 12),
    "I32": (np.int32, 4, 13),
    "U32": (np.uint32, 4, 14),
    "F32": (np.float32, 4, 15),
    "F64": (np.float64, 8, 16),
    "I64": (np.int64, 8, 17),
    "U64": (np.uint64, 8, 18),
}

if torch is not None:
    _TORCH_TO_ST = {
        torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
        torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
        torch.uint8: "U8", torch.bool: "BOOL",
    }
    _ST_TO_TORCH = {v: k for k, v in _TORCH_TO_ST.items()}

_NP_TO_ST = {np.dtype(v[0]): k for k, v in _DTYPES.items() if v[0] is not None}


class SafetensorsError(ValueError):
    pass


def _read_header(buf, path):
    if len(buf) < 8:
        raise SafetensorsError(f"{path}: file too small")
    (n,) = struct.unpack("<Q", buf[:8])
    if n > MAX_HEADER or 8 + n > len(buf):
        raise SafetensorsError(f"{path}: bad header length {n}")
    header = json.loads(bytes(buf[8:8 + n]).decode("utf-8"))
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not an object")
    metadata = header.pop("__metadata__", None)
    data_len = len(buf) - 8 - n
    for name, info in header.items():
        dt = info["dtype"]
        if dt not in _DTYPES:
            raise SafetensorsError(f"{path}: tensor {name}: unknown dtype {dt}")
        b, e = info["data_offsets"]
        numel = 1
        for s in info["shape"]:
            numel *= int(s)
        if e - b != numel * _DTYPES[dt][1] or e > data_len or b < 0:
            raise SafetensorsError(f"{path}: tensor {name}: bad data_offsets {info['data_offsets']}")
    return n, header, metadata or {}


def load_file(path, framework="pt"):
    """Returns (dict name -> tensor/array, metadata dict)."""
    with open(path, "rb") as f:
        buf = f.read()
    n, header, metadata = _read_header(buf, path)
    base = 8 + n
    out = {}
    for name in sorted(header):
        info = header[name]
        dt, shape = info["dtype"], [int(s) for s in info["shape"]]
        b, e = info["data_offsets"]
        raw = buf[base + b:base + e]
        if framework == "np":
            npdt = _DTYPES[dt][0]
            if npdt is None:
                raise SafetensorsError(f"{path}: tensor {name}: {dt} needs framework='pt'")
            out[name] = np.frombuffer(raw, dtype=np.dtype(npdt).newbyteorder("<")).reshape(shape).copy()
        else:
            if dt == "BF16":
                arr = np.frombuffer(raw, dtype="<i2").copy()
                out[name] = torch.from_numpy(arr).view(torch.bfloat16).reshape(shape)
            else:
                arr = np.frombuffer(raw, dtype=np.dtype(_DTYPES[dt][0]).newbyteorder("<")).copy()
                out[name] = torch.from_numpy(arr).reshape(shape)
    return out, metadata


def _as_bytes(t):
    """(format dtype, shape, little-endian bytes) of a torch tensor or numpy array."""
    if torch is not None and isinstance(t, torch.Tensor):
        t = t.detach().cpu().contiguous()
        dt = _TORCH_TO_ST[t.dtype]
        shape = list(t.shape)
        if t.dtype == torch.bfloat16:
            data = t.view(torch.int16).numpy().astype("<i2").tobytes()
        else:
            data = t.numpy().astype(np.dtype(_DTYPES[dt][0]).newbyteorder("<")).tobytes()
        return dt, shape, data
    a = np.ascontiguousarray(t)
    dt = _NP_TO_ST[a.dtype]
    return dt, list(a.shape), a.astype(a.dtype.newbyteorder("<")).tobytes()


def save_file(tensors, path, metadata=None):
    items = {name: _as_bytes(t) for name, t in tensors.items()}
    order = sorted(items, key=lambda k: (-_DTYPES[items[k][0]][2], k))
    header = {}
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    off = 0
    for name in order:
        dt, shape, data = items[name]
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name in order:
            f.write(items[name][2])
    os.replace(tmp, path)


def _main(argv):
    if len(argv) >= 2 and argv[0] == "dump":
        with open(argv[1], "rb") as f:
            buf = f.read()
        n, header, metadata = _read_header(buf, argv[1])
        print(f"header {n} bytes, metadata {metadata}")
        for name in sorted(header):
            i = header[name]
            print(f"{name}: {i['dtype']} {i['shape']} {i['data_offsets']}")
        return 0
    if len(argv) == 3 and argv[0] == "copy":
        tensors, metadata = load_file(argv[1], "pt" if torch is not None else "np")
        save_file(tensors, argv[2], metadata or None)
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
