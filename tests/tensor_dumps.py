"""Writers of small safetensors and .npy files for the CLI test scripts
(python3's standard library only; tests/cli_common.sh puts this folder on
PYTHONPATH)."""
import json
import struct

FMT = {'F32': ('f', 4), 'F16': ('e', 2)}


def write_st(path, tensors, dt):
    """tensors: {name: (flat list of values, shape)}, all stored as dt."""
    hdr, blobs, off = {}, [], 0
    for name, (flat, shape) in tensors.items():
        b = struct.pack('<%d%s' % (len(flat), FMT[dt][0]), *flat)
        hdr[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(hdr).encode()
    h += b' ' * (-len(h) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)) + h + b''.join(blobs))


def write_npy(path, flat, shape):
    """A little-endian f32 .npy file of the given shape."""
    d = "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }" % (
        ''.join('%d, ' % s for s in shape))
    pad = 64 - (10 + len(d) + 1) % 64
    hdr = (d + ' ' * pad + '\n').encode()
    with open(path, 'wb') as f:
        f.write(b'\x93NUMPY\x01\x00' + struct.pack('<H', len(hdr)) + hdr)
        f.write(struct.pack('<%df' % len(flat), *flat))
