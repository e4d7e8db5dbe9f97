#!/usr/bin/env python3
"""Writes the seed corpora for the fuzz targets (python3 stdlib only).

    python3 fuzz/make_corpus.py [fuzz/corpus]

Seeds are small: a few valid files of each shape of interest and a few
malformed ones near the edges the readers check. Output is deterministic.
"""
import json
import os
import struct
import sys

ELEM = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}


def pattern(n, seed):
    """Deterministic non-trivial bytes (includes NaN/Inf bit patterns)."""
    out = bytearray()
    x = seed * 2654435761 + 1
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        out.append(x >> 56)
    return bytes(out)


def safetensors(tensors, metadata=None, pad=True, extra=b""):
    """tensors: list of (name, dtype, shape); laid out back to back."""
    header, data, off = {}, b"", 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for i, (name, dtype, shape) in enumerate(tensors):
        n = ELEM[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [off, off + n]}
        data += pattern(n, i + 1)
        off += n
    text = json.dumps(header, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8")
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data + extra


def st_raw(text, data=b""):
    text = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack("<Q", len(text)) + text + data


def npy(descr, shape, version=1, fortran=False, quote="'", data=None,
        itemsize=4):
    q = quote
    dims = ", ".join(str(d) for d in shape)
    if len(shape) == 1:
        dims += ","
    hdr = ("{%sdescr%s: %s%s%s, %sfortran_order%s: %s, %sshape%s: (%s), }"
           % (q, q, q, descr, q, q, q, "True" if fortran else "False",
              q, q, dims))
    pre = 10 if version == 1 else 12
    total = -(-(pre + len(hdr) + 1) // 64) * 64
    hdr = hdr + " " * (total - pre - len(hdr) - 1) + "\n"
    head = b"\x93NUMPY" + bytes([version, 0])
    head += struct.pack("<H" if version == 1 else "<I", len(hdr))
    if data is None:
        n = itemsize
        for d in shape:
            n *= d
        data = pattern(n, len(shape) + 7)
    return head + hdr.encode("utf-8") + data


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "corpus")
    st = {
        "valid_one_f32": safetensors([("q", "F32", [2, 3])]),
        "valid_mixed": safetensors([("a", "F32", [2, 2]), ("b", "F16", [3]),
                                    ("c", "BF16", [1, 2, 1, 2])]),
        "valid_meta": safetensors([("w", "F16", [4])],
                                  {"format": "pt", "k": "\u00fcn\u00ef"}),
        "valid_scalar_empty": safetensors([("s", "F32", []),
                                           ("e", "BF16", [0, 5]),
                                           ("z", "F16", [2, 0])]),
        "valid_no_tensors": safetensors([]),
        "valid_unpadded": safetensors([("x", "F32", [3])], pad=False),
        "valid_gap": st_raw('{"a":{"dtype":"F32","shape":[1],'
                            '"data_offsets":[4,8]}}', pattern(8, 3)),
        "bad_truncated_prefix": b"\x10\x00\x00",
        "bad_header_len": struct.pack("<Q", 1 << 40) + b"{}",
        "bad_json": st_raw('{"a":{"dtype":"F32",'),
        "bad_dtype_f64": safetensors([("d", "F64", [2])]),
        "bad_overlap": st_raw('{"a":{"dtype":"F32","shape":[2],'
                              '"data_offsets":[0,8]},"b":{"dtype":"F32",'
                              '"shape":[2],"data_offsets":[4,12]}}',
                              pattern(12, 4)),
        "bad_trailing": safetensors([("t", "F16", [2])], extra=b"xyz"),
        "bad_overflow": st_raw('{"h":{"dtype":"F32","shape":[4294967296,'
                               '4294967296,4],"data_offsets":[0,16]}}',
                               pattern(16, 5)),
    }
    nd = {
        "valid_f32_2x3": npy("<f4", [2, 3]),
        "valid_f16_vec": npy("<f2", [5], itemsize=2),
        "valid_f16_scalar": npy("<f2", [], itemsize=2),
        "valid_f32_empty": npy("<f4", [0, 3]),
        "valid_v2_dq": npy("<f4", [1, 2, 2], version=2, quote='"'),
        "valid_v3": npy("<f2", [2, 1, 1, 2], version=3, itemsize=2),
        "bad_magic": b"\x93NUMPZ" + npy("<f4", [2])[6:],
        "bad_version4": npy("<f4", [2])[:6] + b"\x04\x00" + npy("<f4", [2])[8:],
        "bad_big_endian": npy(">f4", [2]),
        "bad_fortran": npy("<f4", [2, 2], fortran=True),
        "bad_object": npy("|O", [2], itemsize=8),
        "bad_truncated": npy("<f4", [4])[:-3],
        "bad_trailing": npy("<f4", [1]) + b"\0",
        "bad_negative": npy("<f4", [2, -1], data=b""),
    }
    for sub, seeds in (("safetensors", st), ("npy", nd)):
        d = os.path.join(root, sub)
        os.makedirs(d, exist_ok=True)
        ext = ".safetensors" if sub == "safetensors" else ".npy"
        for name, blob in sorted(seeds.items()):
            with open(os.path.join(d, name + ext), "wb") as f:
                f.write(blob)
    print("wrote %d safetensors and %d npy seeds under %s"
          % (len(st), len(nd), root))


if __name__ == "__main__":
    main()
