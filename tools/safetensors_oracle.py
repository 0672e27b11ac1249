"""PyPI `safetensors` as the oracle for zerotrain's reader and writer (tests/e2e).

    python3 safetensors_oracle.py dump FILE OUT.json   # load with safetensors.torch; write
                                                       # {metadata, tensors: {name: {dtype, shape, values}}}
    python3 safetensors_oracle.py resave SRC DST       # load_file + save_file (same metadata)
    python3 safetensors_oracle.py write FILE           # known tensors (see below) via save_file

`write` produces, for each dtype, a tensor whose element i is (i % 97 - 40) * 0.25 (floats)
or (i % 97 - 40) * 1000003 (ints), shapes as in SHAPES, metadata {"format": "pt",
"producer": "pypi"}; the C++ side recomputes the same values.
"""
import json
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

SHAPES = {
    "f32": ([3, 5], torch.float32),
    "bf16": ([7], torch.bfloat16),
    "f16": ([2, 3], torch.float16),
    "i32": ([4], torch.int32),
    "i64": ([2, 2], torch.int64),
    "empty": ([0, 4], torch.float32),
}

DTYPE_NAMES = {
    torch.float32: "F32",
    torch.bfloat16: "BF16",
    torch.float16: "F16",
    torch.int32: "I32",
    torch.int64: "I64",
}


def metadata_of(path):
    with safe_open(path, framework="pt") as f:
        return f.metadata() or {}


def dump(path, out):
    tensors = load_file(path)
    result = {"metadata": metadata_of(path), "tensors": {}}
    for name, t in tensors.items():
        if t.dtype.is_floating_point:
            values = [float(v) for v in t.to(torch.float64).flatten().tolist()]
        else:
            values = [int(v) for v in t.flatten().tolist()]
        result["tensors"][name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape), "values": values}
    with open(out, "w") as f:
        json.dump(result, f)


def resave(src, dst):
    save_file(load_file(src), dst, metadata=metadata_of(src))


def write(path):
    tensors = {}
    for name, (shape, dtype) in SHAPES.items():
        n = 1
        for s in shape:
            n *= s
        base = torch.arange(n, dtype=torch.int64) % 97 - 40
        if dtype.is_floating_point:
            t = (base.to(torch.float64) * 0.25).to(dtype)
        else:
            t = (base * 1000003).to(dtype)
        tensors[name] = t.reshape(shape)
    save_file(tensors, path, metadata={"format": "pt", "producer": "pypi"})


def main(argv):
    if len(argv) == 4 and argv[1] == "dump":
        dump(argv[2], argv[3])
    elif len(argv) == 4 and argv[1] == "resave":
        resave(argv[2], argv[3])
    elif len(argv) == 3 and argv[1] == "write":
        write(argv[2])
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
