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


# ---- fuzz_attention: inputs laid out as fuzz_attention.c reads them ------
def t_spec(dtype=0, lay=0, perm=(0, 0, 0), step=0, pad=(0, 0, 0, 0), al=0, off=0):
    """One tensor: dtype byte, then make_tensor's bytes."""
    out = [dtype, lay]
    if lay % 4 >= 2:
        out += list(perm)
    if lay % 4 == 3:
        out.append(step)
    if lay & 16:
        out += list(pad)
    out += [0, al]  # brk = 0: a valid descriptor
    if 5 <= al < 7:
        out.append(off)
    return out


def attn(op, be, threads, tq, kv, cf, seed, B, H, dsel, sq, skv, tensors,
         sparse=(), sout=0, alias=4, ls=0, sc=0, nan=0, nth=0):
    head = [op, be, threads, tq, kv, cf] + list(struct.pack(">I", seed))
    body = [B, H, dsel, sq, skv] + list(sparse)
    for i, t in enumerate(tensors):
        if i == 3 and op == 2:
            body.append(sout)  # read before out's own bytes
        body += t
    body += [alias, ls, sc, nan, nth]
    return bytes(head + body)


def svg(be, threads, F, Hp, Wp, t, text, text_real, heads, dim, density,
        steps, layers, rows, sink, tl, extra, B, tensors, alias=1, layer=2,
        step=3):
    out = [3, be, threads, 0, 3, 1, 0, 0, 7, 7, F, Hp, Wp, t]
    if t % 3:
        out.append(text)
        if text % 7:
            out.append(text_real)
    out += [heads, dim, density, steps, layers, rows, sink, tl] + list(extra)
    out += [0, B]  # x = 0: no extreme field
    for t_ in tensors:
        out += t_
    out += [alias, layer, step]
    return bytes(out)


def attention_seeds():
    f32, f16, bf16 = 0, 1, 2
    plain = [t_spec(f32), t_spec(f32), t_spec(f32), t_spec(f32)]
    mixed = [t_spec(f32, 1), t_spec(f16, 2, (1, 0, 2)),
             t_spec(bf16, 19, (2, 1, 0), 1, (1, 2, 3, 0)),
             t_spec(f16, 16, pad=(3, 0, 1, 2), al=5, off=3)]
    seeds = {
        # dense, portable / avx2 / ref, f32 bshd, lse
        "dense_portable": attn(0, 1, 1, 0, 1, 1, 11, 0, 1, 31, 20, 40, plain,
                               ls=1),
        "dense_avx2_mixed": attn(0, 2, 1, 5, 3, 1, 12, 1, 2, 63, 37, 70,
                                 mixed, ls=1, sc=3),
        "dense_ref_odd_d": attn(0, 0, 0, 1, 0, 0, 13, 0, 0, 110, 5, 17, plain),
        "part_avx2": attn(1, 2, 1, 0, 7, 1, 14, 1, 1, 15, 47, 33, mixed,
                          ls=1, nth=3),
        "dense_out_is_q": attn(0, 1, 0, 0, 1, 1, 15, 0, 0, 7, 9, 9, plain,
                               alias=0),
    }
    # sparse, plain sequence: causal(offset 0) OR local(3, 5), q_rows
    causal_or_local = [0,  # gsel: plain sequence
                       0,  # nm: one mask
                       1, 8,          # index leaf: causal, offset 0
                       1,             # c: OR with a second leaf
                       2, 3, 5,       # local(3, 5)
                       0, 0, 0,       # head -> mask 0
                       7, 2, 1,       # ts: q_tile, kv_tile, q_rows
                       5] + [10, 0, 3, 0, 40, 0, 3, 0, 19, 0, 0, 0] + [0]
    seeds["sparse_plain_rows"] = attn(2, 2, 1, 0, 1, 1, 21, 0, 2, 23, 47,
                                      47, plain, sparse=causal_or_local)
    # sparse, 2 x 4 x 4 video: frame window / position band, temporal orders
    video = [1, 1, 3, 3,      # gsel: video; F 2, Hp 4, Wp 4
             1,               # two masks
             1, 0, 1, 0,      # video leaf: frame window 1; single
             1, 1, 3, 0,      # video leaf: position band 3; single
             0, 1,            # heads -> masks 0, 1
             1, 2,            # q_order position-major, kv_order sink-first
             3, 1, 0,         # ts: q_tile 12, kv_tile 16
             5]               # so: naive mode, PREPERMUTED
    seeds["sparse_video_orders"] = attn(2, 1, 1, 0, 1, 1, 22, 1, 1, 19, 0, 0,
                                        mixed, sparse=video, ls=1)
    video_rows = video[:17] + [4, 3, 0, 0, 10, 0, 20, 0, 31, 0, 2]
    seeds["sparse_video_q_rows"] = attn(2, 0, 1, 0, 1, 1, 23, 0, 1, 19, 0,
                                        0, plain, sparse=video_rows, ls=1)
    # SVG: 2 x 4 x 6 video with a prefix text, 2 heads
    seeds["svg_prefix_text"] = svg(2, 1, 1, 3, 5, 1, 4, 3, 1, 31, 80, 0, 0,
                                   5, 1, 0, (), 1, plain)
    seeds["svg_dense_policy"] = svg(1, 0, 2, 2, 2, 0, 0, 0, 0, 15, 120, 2, 2,
                                    3, 0, 3, (30, 1), 0, mixed)
    return seeds


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
    at = attention_seeds()
    for sub, seeds in (("safetensors", st), ("npy", nd), ("attention", at)):
        d = os.path.join(root, sub)
        os.makedirs(d, exist_ok=True)
        ext = {"safetensors": ".safetensors", "npy": ".npy"}.get(sub, ".bin")
        for name, blob in sorted(seeds.items()):
            with open(os.path.join(d, name + ext), "wb") as f:
                f.write(blob)
    print("wrote %d safetensors, %d npy and %d attention seeds under %s"
          % (len(st), len(nd), len(at), root))


if __name__ == "__main__":
    main()
