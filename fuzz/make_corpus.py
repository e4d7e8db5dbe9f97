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
def t_spec(dtype=0, lay=0, perm=(0, 0, 0), step=0, pad=(0, 0, 0, 0), al=0, off=0,
           mag=(0,)):
    """One tensor: dtype byte, then make_tensor's bytes; mag: the magnitude
    profile's bytes (fuzz_tensor.h, shape_values; 0: uniform in [-2, 2))."""
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
    return out + list(mag)


# Magnitude profiles (shape_values). Exponent bytes e map to 2^E over the
# dtype's range: E = emin + (e * (emax + 2 - emin) + 127) // 255.
def exp_byte(E, dtype):
    """The byte that draws exponent E (or the nearest above) for a dtype."""
    lo, hi = {0: (-149, 129), 1: (-24, 17), 2: (-133, 129)}[dtype]
    for e in range(256):
        if lo + (e * (hi - lo) + 127) // 255 >= E:
            return e
    return 255


def mag_whole(E, dtype):
    return (4, exp_byte(E, dtype))


def mag_rows(E, dtype, n=1, set_=False):
    return (5, (n - 1) | (16 if set_ else 0)) + (exp_byte(E, dtype),) * n


def mag_elems(kinds):
    """kinds: extreme_value kinds (0 max, 1 min subnormal, 2 min normal,
    3 zero, 4 1e12; | 8: negative)."""
    return (6, len(kinds) - 1) + tuple(kinds)


# layer / step bytes (draw_index)
IDX_MAX, IDX_MIN, IDX_2P58_9, IDX_M1 = [224], [225], [226], [227]
IDX_1E8 = [229]


def attn(op, be, threads, tq, kv, cf, seed, B, H, dsel, sq, skv, tensors,
         sparse=(), sout=0, alias=4, ls=0, sc=0, nan=0, nth=0, fit=0):
    head = [op, be, threads, tq, kv, cf] + list(struct.pack(">I", seed))
    body = [B, H, dsel, sq, skv] + list(sparse)
    for i, t in enumerate(tensors):
        if i == 3 and op == 2:
            body.append(sout)  # read before out's own bytes
        body += t
    body += [alias, ls, sc, nan, fit, nth]
    return bytes(head + body)


def svg(be, threads, F, Hp, Wp, t, text, text_real, heads, dim, density,
        steps, layers, rows, sink, tl, extra, B, tensors, alias=1, layer=(2,),
        step=(3,), fit=0):
    out = [3, be, threads, 0, 3, 1, 0, 0, 7, 7, F, Hp, Wp, t]
    if t % 3:
        out.append(text)
        if text % 7:
            out.append(text_real)
    out += [heads, dim, density, steps, layers, rows, sink, tl] + list(extra)
    out += [0, B]  # x = 0: no extreme field
    for t_ in tensors:
        out += t_
    out += [alias, fit] + list(layer) + list(step)
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
    # extremes: values over each dtype's finite range, huge and negative indices
    k_outlier = [t_spec(bf16), t_spec(bf16, mag=mag_elems([4])),
                 t_spec(bf16), t_spec(f32)]
    seeds["dense_bf16_k_outlier_1e12"] = attn(0, 3, 0, 0, 1, 1, 31, 0, 1, 63,
                                              40, 70, k_outlier, ls=1)
    big_q = [t_spec(f32, mag=mag_whole(120, f32)), t_spec(f32), t_spec(f32),
             t_spec(f32)]
    seeds["dense_f32_q_huge_fit_k"] = attn(0, 3, 1, 0, 2, 1, 32, 0, 1, 31, 30,
                                           50, big_q, ls=1, fit=1)
    v_max = [t_spec(f32), t_spec(f32), t_spec(f32, mag=mag_rows(128, f32, 2)),
             t_spec(f32)]
    seeds["dense_f32_v_near_max"] = attn(0, 2, 0, 0, 3, 1, 33, 0, 1, 15, 20,
                                         33, v_max)
    tiny = [t_spec(f16, mag=mag_whole(-20, f16)), t_spec(f16),
            t_spec(f16, mag=mag_whole(-22, f16)), t_spec(f16)]
    seeds["part_f16_subnormal"] = attn(1, 3, 1, 0, 1, 1, 34, 0, 0, 47, 25,
                                       25, tiny, nth=1)
    mixed_mag = [t_spec(bf16, mag=(7, exp_byte(60, bf16), 1, exp_byte(100, bf16),
                                   exp_byte(-120, bf16), 2, 0, 9, 1)),
                 t_spec(bf16, mag=mag_elems([0, 8, 3])),
                 t_spec(f16, mag=mag_elems([0, 1, 2])), t_spec(bf16)]
    seeds["sparse_bf16_mixed_magnitudes"] = attn(2, 3, 1, 0, 1, 1, 35, 0, 2,
                                                 31, 47, 47, mixed_mag,
                                                 sparse=causal_or_local, fit=5)
    seeds["svg_layer_int64_max"] = svg(2, 1, 1, 3, 5, 0, 0, 0, 1, 31, 80, 0,
                                       0, 5, 1, 0, (), 0, plain,
                                       layer=IDX_MAX, step=IDX_2P58_9)
    seeds["svg_step_negative"] = svg(3, 0, 1, 3, 3, 0, 0, 0, 0, 15, 80, 0, 0,
                                     5, 1, 0, (), 0, plain, layer=[1],
                                     step=IDX_M1)
    seeds["svg_layer_int64_min_huge_k"] = svg(
        3, 0, 1, 2, 2, 0, 0, 0, 0, 7, 80, 0, 0, 3, 0, 0, (), 0,
        [t_spec(f32), t_spec(f32, mag=mag_whole(100, f32)), t_spec(f32),
         t_spec(f16)], layer=IDX_MIN, fit=3)
    return seeds


# ---- fuzz_svg2_session: inputs laid out as fuzz_svg2_session.c reads them ----
def svg2_config(F=2, Hp=4, Wp=4, t=0, text=0, text_real=0, heads=1, dim=15,
                qc=0, kc=0, tp=0, mkf=0, dens=80, me=0, tl=0, tiles=(),
                rows=7, sink=1, dp=0, it=3, x=0, extra=()):
    out = [F - 1, Hp - 1, Wp - 1, t]
    if t % 3:
        out.append(text)
        if text:
            out.append(text_real)
    out += [heads - 1, dim - 1, qc, kc, tp, mkf, dens, me, tl] + list(tiles)
    out += [rows, sink, dp, it, x] + list(extra)
    return out


def svg2_call(B=1, layer=(0,), step=(0,), wrong=0, tensors=None, wl=1,
              wl_mags=(), al=2, fit=0, nf=0, co=0, co_extra=(), rp=15):
    tensors = tensors or [[0] + t_spec()[1:]] * 4
    out = [B - 1] + list(layer) + list(step) + [wrong]
    for t in tensors:
        out += t
    out.append(wl)
    if wl % 4 == 0:
        out += list(wl_mags)
    out += [al, fit, nf, co] + list(co_extra) + [rp]
    return out


def svg2_session(be, th, cf, seed, config, calls):
    out = [be, th, cf, 0, 1] + list(struct.pack(">I", seed)) + config
    out.append(len(calls) - 1)
    for c in calls:
        out += c
    return bytes(out)


def svg2_seeds():
    f32, f16, bf16 = 0, 1, 2
    plain = [t_spec(f32)] * 4
    bhsd = [t_spec(f16, 1), t_spec(bf16, 1), t_spec(f32, 1), t_spec(bf16, 1)]
    base = svg2_config(qc=4 * 3 + 1, kc=4 * 5 + 1, tp=4 * 30 + 1 + 80)
    budget = svg2_config(F=3, Hp=4, Wp=6, t=1, text=5, text_real=3, heads=2,
                         dim=16, qc=4 * 4 + 2, kc=0, tp=110, mkf=20, me=200,
                         tl=3, tiles=(11, 1), rows=16, sink=1, it=0x21)
    seeds = {
        "warm_layers": svg2_session(3, 0, 1, 41, base, [
            svg2_call(tensors=plain), svg2_call(tensors=plain),
            svg2_call(layer=[1], tensors=plain),
            svg2_call(layer=[1], step=[2], tensors=plain)]),
        "batch_change_bhsd": svg2_session(2, 1, 1, 42, base, [
            svg2_call(B=1, tensors=bhsd), svg2_call(B=2, tensors=bhsd),
            svg2_call(B=1, tensors=bhsd, rp=3)]),
        "budget_text_workload": svg2_session(3, 1, 1, 43, budget, [
            svg2_call(tensors=plain, wl=0, wl_mags=(0, 0, 0)),
            svg2_call(tensors=plain, wl=0, wl_mags=(0, 0, 0), co=3,
                      co_extra=(6,)),
            svg2_call(B=2, tensors=plain, wl=0, wl_mags=(0, 0, 0), co=2)]),
        "huge_layers": svg2_session(3, 0, 1, 44, base, [
            svg2_call(layer=IDX_MAX, tensors=plain),
            svg2_call(layer=IDX_2P58_9, step=IDX_1E8, tensors=plain),
            svg2_call(layer=IDX_M1, tensors=plain),
            svg2_call(layer=IDX_MIN, step=IDX_MAX, tensors=plain)]),
        "random_layer_twins": svg2_session(1, 7, 1, 45, base, [
            svg2_call(layer=[228, 1, 2, 3, 4, 5, 6, 7, 8], tensors=plain),
            svg2_call(layer=[231, 26], step=[230, 9], tensors=plain)]),
        "extreme_values": svg2_session(3, 1, 1, 46, base, [
            svg2_call(tensors=[t_spec(bf16), t_spec(bf16, mag=mag_elems([4, 0])),
                               t_spec(bf16, mag=mag_rows(127, bf16)),
                               t_spec(bf16)]),
            svg2_call(tensors=[t_spec(f32, mag=mag_whole(125, f32)), t_spec(f32),
                               t_spec(f32, mag=mag_whole(-140, f32)),
                               t_spec(f32)], fit=1),
            svg2_call(tensors=[t_spec(f16, mag=mag_whole(14, f16)),
                               t_spec(f16, mag=mag_whole(-16, f16)),
                               t_spec(f16, mag=mag_elems([0, 8])),
                               t_spec(f16)], fit=5)]),
        "nan_unchecked": svg2_session(2, 0, 0, 47, base, [
            svg2_call(tensors=plain, nf=252), svg2_call(tensors=plain)]),
        # read_config's extreme byte x >= 232 sets field x % 12: 3 is top_p
        "bad_config_top_p": svg2_session(1, 0, 1, 48,
                                         svg2_config(x=243, extra=(0,)),
                                         [svg2_call(tensors=plain)]),
        "bad_config_kmeans_iters": svg2_session(1, 0, 1, 49,
                                                svg2_config(x=245, extra=(4,)),
                                                [svg2_call(tensors=plain)]),
    }
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
    s2 = svg2_seeds()
    for sub, seeds in (("safetensors", st), ("npy", nd), ("attention", at),
                       ("svg2_session", s2)):
        d = os.path.join(root, sub)
        os.makedirs(d, exist_ok=True)
        ext = {"safetensors": ".safetensors", "npy": ".npy"}.get(sub, ".bin")
        for name, blob in sorted(seeds.items()):
            with open(os.path.join(d, name + ext), "wb") as f:
                f.write(blob)
    print("wrote %d safetensors, %d npy, %d attention and %d svg2_session seeds "
          "under %s" % (len(st), len(nd), len(at), len(s2), root))


if __name__ == "__main__":
    main()
