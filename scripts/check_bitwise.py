"""Writes the outputs scripts/check_bitwise.sh compares: inputs, or the
bf16-terms cases the CLI cannot set (stsa run takes no --bf16-terms).

  check_bitwise.py inputs DIR          q/k/v safetensors for every D and dtype
  check_bitwise.py terms DIR BACKEND   dense and sparse outputs at bf16 terms
                                       1, 2 and 3 through the Python binding
                                       (STSA_LIBRARY names the library)
"""

import json
import sys

import ml_dtypes
import numpy as np

FRAMES, HEIGHT, WIDTH, TEXT = 3, 10, 13, 7  # 397 tokens: no tile's multiple
HEADS = 2
DIMS = (64, 80, 128)
DTYPES = {"f32": (np.float32, "F32"), "f16": (np.float16, "F16"),
          "bf16": (ml_dtypes.bfloat16, "BF16")}


def tokens():
    return TEXT + FRAMES * HEIGHT * WIDTH


def qkv(dim, dtype, seed=7):
    """Random q, k, v [1, S, H, D] with a little structure: keys near their
    own frame's mean, so the heads are not all alike."""
    rng = np.random.default_rng(seed + dim)
    shape = (1, tokens(), HEADS, dim)
    frame = rng.standard_normal((FRAMES + 1, 1, HEADS, dim)) * 1.5
    which = np.minimum(np.arange(tokens()) // (HEIGHT * WIDTH), FRAMES)
    q = rng.standard_normal(shape) + frame[which].transpose(1, 0, 2, 3)
    k = rng.standard_normal(shape) + frame[which].transpose(1, 0, 2, 3)
    v = rng.standard_normal(shape) * 3.0
    return [x.astype(np.float32).astype(DTYPES[dtype][0]) for x in (q, k, v)]


def write_safetensors(path, tensors, code):
    header, blobs, at = {}, [], 0
    for name, x in tensors.items():
        raw = np.ascontiguousarray(x).tobytes()
        header[name] = {"dtype": code, "shape": list(x.shape),
                        "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def inputs(out_dir):
    for dim in DIMS:
        for dtype, (_, code) in DTYPES.items():
            q, k, v = qkv(dim, dtype)
            write_safetensors(f"{out_dir}/qkv_d{dim}_{dtype}.safetensors",
                              {"q": q, "k": k, "v": v}, code)


def terms(out_dir, backend):
    import stsa  # noqa: PLC0415 (only this command needs the library)

    mask = stsa.masks.local(40, 40)
    for dim in DIMS:
        q, k, v = qkv(dim, "bf16")
        for t in (1, 2, 3):
            ctx = stsa.Context(threads=1, backend=backend, bf16_terms=t, kv_tile=64)
            for name, out in (
                    ("dense", stsa.attention(q, k, v, layout="bshd", ctx=ctx)),
                    ("sparse", stsa.sparse_attention(q, k, v, layout="bshd", mask=mask,
                                                     ctx=ctx))):
                np.asarray(out).tofile(f"{out_dir}/terms{t}_{name}_d{dim}_{backend}.bin")


if __name__ == "__main__":
    {"inputs": lambda: inputs(sys.argv[2]),
     "terms": lambda: terms(sys.argv[2], sys.argv[3])}[sys.argv[1]]()
