"""A reader of pprof profiles (perftools.profiles.Profile, gzipped
protobuf) in pure Python: the tests check scralloc's SCRALLOC_PROFILE
files with it, with no protobuf package and no pprof binary.

    python3 tests/tools/pprof_read.py PROFILE.pb.gz [--top N]

prints the sample types and the top functions by the last sample value
(inuse_space): flat (the leaf) and cumulative (anywhere on the stack).

As a module: read(path) -> dict with sample_type [(type, unit)], samples
[{"locations": [ids, leaf first], "values": [...], "labels": {key: num
or str}}], locations {id: {"mapping": id, "address": n, "lines":
[(function_id, line), innermost first]}}, functions {id: {"name",
"system_name", "filename", "start_line"}}, mappings {id: {...}},
strings [...], period_type, period, time_nanos, default_sample_type;
stack(profile, sample) -> [(function name, filename, line)], leaf first,
inlined frames expanded.
"""
import gzip
import sys


class DecodeError(ValueError):
    pass


def _varint(buf, i):
    shift = value = 0
    while True:
        if i >= len(buf):
            raise DecodeError("truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise DecodeError("varint longer than 10 bytes")


def fields(buf):
    """Yields (field number, wire type, value) of one message: an int for
    varints and fixed-width fields, bytes for length-delimited ones."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        field, wt = key >> 3, key & 7
        if field == 0:
            raise DecodeError("field number 0")
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 1:
            v, i = int.from_bytes(buf[i:i + 8], "little"), i + 8
        elif wt == 2:
            n, i = _varint(buf, i)
            if i + n > len(buf):
                raise DecodeError("length-delimited field past the end")
            v, i = bytes(buf[i:i + n]), i + n
        elif wt == 5:
            v, i = int.from_bytes(buf[i:i + 4], "little"), i + 4
        else:
            raise DecodeError(f"wire type {wt}")
        if i > len(buf):
            raise DecodeError("field past the end")
        yield field, wt, v


def _ints(wt, v):
    """A repeated integer field's values: packed (bytes) or one varint."""
    if wt == 0:
        return [v]
    out, i = [], 0
    while i < len(v):
        x, i = _varint(v, i)
        out.append(x)
    return out


def _signed(x):
    return x - (1 << 64) if x >> 63 else x


def _msg(buf, ints=(), repeated=()):
    d = {}
    for f, wt, v in fields(buf):
        if f in repeated:
            d.setdefault(f, []).extend(_ints(wt, v))
        elif f in ints:
            d[f] = _signed(v)
        else:
            d.setdefault(f, []).append(v)
    return d


def decode(raw):
    """The Profile message of ungzipped bytes."""
    p = {"sample_type": [], "samples": [], "mappings": {}, "locations": {}, "functions": {}, "strings": []}
    st_raw, period_type = [], None
    other = {}
    for f, wt, v in fields(raw):
        if f == 1:
            st_raw.append(_msg(v, ints=(1, 2)))
        elif f == 2:
            s = {"locations": [], "values": [], "labels_raw": []}
            for sf, swt, sv in fields(v):
                if sf == 1:
                    s["locations"] += _ints(swt, sv)
                elif sf == 2:
                    s["values"] += [_signed(x) for x in _ints(swt, sv)]
                elif sf == 3:
                    s["labels_raw"].append(_msg(sv, ints=(1, 2, 3, 4)))
            p["samples"].append(s)
        elif f == 3:
            m = _msg(v, ints=(1, 2, 3, 4, 5, 6, 7, 8, 9, 10))
            p["mappings"][m.get(1, 0)] = {
                "memory_start": m.get(2, 0), "memory_limit": m.get(3, 0), "file_offset": m.get(4, 0),
                "filename": m.get(5, 0), "has_functions": bool(m.get(7)), "has_filenames": bool(m.get(8)),
                "has_line_numbers": bool(m.get(9)), "has_inline_frames": bool(m.get(10))}
        elif f == 4:
            loc = {"mapping": 0, "address": 0, "lines": []}
            lid = 0
            for lf, lwt, lv in fields(v):
                if lf == 1:
                    lid = lv
                elif lf == 2:
                    loc["mapping"] = lv
                elif lf == 3:
                    loc["address"] = lv
                elif lf == 4:
                    ln = _msg(lv, ints=(1, 2, 3))
                    loc["lines"].append((ln.get(1, 0), ln.get(2, 0)))
            p["locations"][lid] = loc
        elif f == 5:
            fn = _msg(v, ints=(1, 2, 3, 4, 5))
            p["functions"][fn.get(1, 0)] = {"name": fn.get(2, 0), "system_name": fn.get(3, 0),
                                            "filename": fn.get(4, 0), "start_line": fn.get(5, 0)}
        elif f == 6:
            p["strings"].append(v.decode("utf-8", "replace"))
        elif f == 11:
            period_type = _msg(v, ints=(1, 2))
        else:
            other[f] = v
    strs = p["strings"]
    if not strs or strs[0] != "":
        raise DecodeError("string_table[0] must be empty")

    def s(i):
        if not 0 <= i < len(strs):
            raise DecodeError(f"string index {i} out of range")
        return strs[i]

    p["sample_type"] = [(s(t.get(1, 0)), s(t.get(2, 0))) for t in st_raw]
    for m in p["mappings"].values():
        m["filename"] = s(m["filename"])
    for fn in p["functions"].values():
        for k in ("name", "system_name", "filename"):
            fn[k] = s(fn[k])
    for smp in p["samples"]:
        smp["labels"] = {s(l.get(1, 0)): (l[3] if 3 in l else s(l.get(2, 0))) for l in smp.pop("labels_raw")}
        if len(smp["values"]) != len(p["sample_type"]):
            raise DecodeError("a sample's values do not match sample_type")
        for lid in smp["locations"]:
            if lid not in p["locations"]:
                raise DecodeError(f"sample names location {lid}, which is not there")
    for loc in p["locations"].values():
        if loc["mapping"] and loc["mapping"] not in p["mappings"]:
            raise DecodeError(f"location names mapping {loc['mapping']}, which is not there")
        for fid, _ in loc["lines"]:
            if fid not in p["functions"]:
                raise DecodeError(f"line names function {fid}, which is not there")
    p["period_type"] = (s(period_type.get(1, 0)), s(period_type.get(2, 0))) if period_type else None
    p["period"] = _signed(other.get(12, 0))
    p["time_nanos"] = _signed(other.get(9, 0))
    p["default_sample_type"] = s(_signed(other.get(14, 0)))
    return p


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)  # checks the CRC-32 and the length
    return decode(data)


def stack(p, sample):
    """The sample's frames, leaf first, as (function, filename, line)."""
    out = []
    for lid in sample["locations"]:
        for fid, line in p["locations"][lid]["lines"]:
            fn = p["functions"][fid]
            out.append((fn["name"], fn["filename"], line))
    return out


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    top = int(argv[argv.index("--top") + 1]) if "--top" in argv else 10
    p = read(argv[0])
    print("sample types:", ", ".join(f"{t}/{u}" for t, u in p["sample_type"]))
    print(f"period: {p['period']} {p['period_type']}; {len(p['samples'])} samples, "
          f"{len(p['locations'])} locations, {len(p['functions'])} functions")
    flat, cum, total = {}, {}, 0
    for smp in p["samples"]:
        v = smp["values"][-1]
        total += v
        frames = stack(p, smp)
        if frames:
            flat[frames[0][0]] = flat.get(frames[0][0], 0) + v
        for name in {f[0] for f in frames}:
            cum[name] = cum.get(name, 0) + v
    print(f"{'flat':>14} {'flat%':>6} {'cum':>14} {'cum%':>6}  function")
    for name, v in sorted(cum.items(), key=lambda kv: (-kv[1], -flat.get(kv[0], 0), kv[0]))[:top]:
        fv = flat.get(name, 0)
        print(f"{fv:14d} {100 * fv / max(total, 1):6.2f} {v:14d} {100 * v / max(total, 1):6.2f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
