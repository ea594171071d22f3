#!/usr/bin/env python3
"""Where two builds of the kernels library differ.

    scripts/elf-diff.py A.so B.so

Compares two ELF files section by section and prints each section whose
bytes differ (its name, size and how many bytes differ). Where the CUDA
fat binary (.nv_fatbin) differs, it extracts the device code of both with
`cuobjdump -xelf all` and compares each pair of cubins the same way; where
a cubin's call-frame information (.debug_frame) differs, it names the
functions whose entries differ. Exit status: 0 the same bytes, 1 they
differ, 2 bad input.

Used by scripts/kernels-repro.sh to say why two builds of the same source
with the same compiler did not give the same digest.
"""
import filecmp
import os
import struct
import subprocess
import sys
import tempfile


class BadELF(Exception):
    pass


def load(path):
    """(bytes, [(name, offset, size, type, link, info)]) of an ELF64 file."""
    with open(path, "rb") as f:
        a = f.read()
    if len(a) < 64 or a[:4] != b"\x7fELF" or a[4] != 2 or a[5] != 1:
        raise BadELF(f"{path}: not a little-endian ELF64 file")
    shoff = struct.unpack_from("<Q", a, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", a, 0x3A)
    if shentsize != 64 or shoff + shnum * 64 > len(a) or shstrndx >= shnum:
        raise BadELF(f"{path}: section header table out of bounds")
    raw = []
    for i in range(shnum):
        name, typ, _flags, _addr, off, size, link, info, _align, _es = struct.unpack_from("<IIQQQQIIQQ", a, shoff + i * 64)
        if typ != 8 and off + size > len(a):  # SHT_NOBITS has no bytes in the file
            raise BadELF(f"{path}: section {i} out of bounds")
        raw.append((name, off, size if typ != 8 else 0, typ, link, info))
    stro = raw[shstrndx][1]
    return a, [(cstr(a, stro + n, path), off, size, typ, link, info) for n, off, size, typ, link, info in raw]


def cstr(a, o, path):
    """The NUL-terminated string at offset o of a (the contents of file path)."""
    end = a.find(b"\0", o)
    if end < 0:
        raise BadELF(f"{path}: unterminated string at {o}")
    return a[o:end].decode("utf-8", "replace")


def fde_functions(a, secs, lo, hi, path):
    """Names of the symbols that .debug_frame's relocations in [lo, hi) refer to."""
    names = []
    for name, off, size, _typ, link, info in secs:
        if name != ".rela.debug_frame":
            continue
        _sn, symo, _ss, _st, strl, _si = secs[link]
        stro = secs[strl][1]
        for k in range(size // 24):
            r_off, r_info, _add = struct.unpack_from("<QQq", a, off + k * 24)
            if lo <= r_off < hi:
                nmo = struct.unpack_from("<I", a, symo + (r_info >> 32) * 24)[0]
                names.append(cstr(a, stro + nmo, path))
    return names


def frame_entries(d):
    """(offset, length) of each CIE/FDE in a .debug_frame section."""
    pos = 0
    while pos + 4 <= len(d):
        n, hdr = struct.unpack_from("<I", d, pos)[0], 4
        if n == 0xFFFFFFFF:
            if pos + 12 > len(d):
                return
            n, hdr = struct.unpack_from("<Q", d, pos + 4)[0], 12
        if n == 0:
            return
        yield pos, hdr + n
        pos += hdr + n


def compare(pa, pb, indent=""):
    a, sa = load(pa)
    b, sb = load(pb)
    if a == b:
        return False
    if [s[0] for s in sa] != [s[0] for s in sb]:
        print(f"{indent}different section lists: {[s[0] for s in sa]} / {[s[0] for s in sb]}")
        return True
    for (name, oa, za, *_), (_n, ob, zb, *_r) in zip(sa, sb):
        x, y = a[oa:oa + za], b[ob:ob + zb]
        if x == y:
            continue
        nd = sum(1 for i in range(za) if x[i] != y[i]) if za == zb else None
        print(f"{indent}{name}: {za} / {zb} bytes" + (f", {nd} differ" if nd is not None else ", sizes differ"))
        if name == ".debug_frame" and za == zb:
            for off, n in frame_entries(x):
                if x[off:off + n] != y[off:off + n]:
                    fns = fde_functions(a, sa, off, off + n, pa) or ["(no relocation: a CIE?)"]
                    print(f"{indent}  the entry at {off} ({n} bytes): {', '.join(fns)}")
        if name == ".nv_fatbin":
            compare_fatbins(pa, pb, indent + "  ")
    return True


def compare_fatbins(pa, pb, indent):
    with tempfile.TemporaryDirectory() as t:
        lists = []
        for i, p in enumerate((pa, pb)):
            d = os.path.join(t, str(i))
            os.mkdir(d)
            r = subprocess.run(["cuobjdump", "-xelf", "all", os.path.abspath(p)], cwd=d, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{indent}cuobjdump -xelf all {p}: {r.stderr.strip() or r.returncode}")
                return
            lists.append(sorted(os.listdir(d)))
        if len(lists[0]) != len(lists[1]):
            print(f"{indent}{len(lists[0])} / {len(lists[1])} cubins")
            return
        for x, y in zip(*lists):
            # cuobjdump names them after the file: <name>.<n>.<arch>.cubin
            label = x.split(".", 1)[1] if "." in x else x
            pa_, pb_ = os.path.join(t, "0", x), os.path.join(t, "1", y)
            if filecmp.cmp(pa_, pb_, shallow=False):
                continue
            print(f"{indent}cubin {label}:")
            compare(pa_, pb_, indent + "  ")


def main():
    if len(sys.argv) != 3:
        print("usage: elf-diff.py A B", file=sys.stderr)
        return 2
    try:
        return 1 if compare(sys.argv[1], sys.argv[2]) else 0
    except (OSError, BadELF, struct.error) as e:
        print(f"elf-diff: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
