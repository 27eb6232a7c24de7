"""gguf_read.py - read the F32 tensors of a GGUF file (the ones build_gguf.py writes), so a
committed model can seed further training. Only what those files use: GGUF v2/v3, any
metadata (skipped), F32 tensors (others are an error naming the tensor)."""
import struct

import numpy as np

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


class _Reader:
    def __init__(self, data):
        self.d, self.o = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.d, self.o)[0]
        self.o += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.d[self.o:self.o + n].decode("utf-8")
        self.o += n
        return s

    def value(self, t):
        if t in _SCALAR:
            return self.take(_SCALAR[t])
        if t == _STRING:
            return self.string()
        if t == _ARRAY:
            et, n = self.take("<I"), self.take("<Q")
            return [self.value(et) for _ in range(n)]
        raise ValueError("gguf: unknown metadata type %d at offset %d" % (t, self.o))


def read_f32_tensors(path):
    """{name: numpy array shaped as torch holds it (reversed GGUF ne)} and the metadata dict."""
    with open(path, "rb") as f:
        data = f.read()
    r = _Reader(data)
    if data[:4] != b"GGUF":
        raise ValueError("%s: not a GGUF file" % path)
    r.o = 4
    version = r.take("<I")
    if version not in (2, 3):
        raise ValueError("%s: GGUF version %d not supported" % (path, version))
    n_t, n_kv = r.take("<Q"), r.take("<Q")
    meta = {}
    for _ in range(n_kv):
        k = r.string()
        meta[k] = r.value(r.take("<I"))
    infos = []
    for _ in range(n_t):
        name = r.string()
        nd = r.take("<I")
        ne = [r.take("<Q") for _ in range(nd)]
        typ = r.take("<I")
        off = r.take("<Q")
        if typ != 0:
            raise ValueError("%s: tensor %s has type %d, only F32 (0) is read" % (path, name, typ))
        infos.append((name, ne, off))
    align = int(meta.get("general.alignment", 32))
    base = (r.o + align - 1) // align * align
    out = {}
    for name, ne, off in infos:
        n = int(np.prod(ne))
        a = np.frombuffer(data, dtype="<f4", count=n, offset=base + off)
        out[name] = a.reshape(list(reversed(ne))).copy()
    return out, meta
