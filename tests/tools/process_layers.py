#!/usr/bin/env python3
"""The process allocator's files depend on each other in one direction.

Every file in core/src/process/ names its layer in its opening comment
("Layer: arenas", say).  This script maps every definition that another
file can use (a function or a variable that is not static, and the static
inline functions and macros of the headers) to the file that defines it,
finds which of them each file uses (through the headers' inlines and
macros: a file that calls an inline of a header depends on what the
inline calls), and checks that
  - every file's layer is one of LAYERS,
  - no file uses a file of a layer above its own,
  - the files' graph has no cycle (within a layer too),
  - core/src/static.c includes every file, layer by layer, bottom up,
  - every core internal a process file uses is in CORE_ALLOWED: the
    `_scr_*` functions, variables, inlines and macros the core defines
    outside core/src/process/, and the fields of scr_page and
    scr_segment (core/src/types.h) it reads or writes.
It prints the layers with their files and the edges, the core internals
each file uses, and exits 1 on a violation, so that `make test` fails on
a new cycle or a new use of the core's internals.
"""
import os
import re
import sys

# bottom up
LAYERS = ["base", "arenas", "caches", "entry", "observers"]

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DIR = os.path.join(ROOT, "core", "src", "process")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# The process layer's interface to the core: every core internal a file of
# core/src/process/ may use, grouped by what it does for the process
# layer.  Written as it is today; a use not listed fails, so that a new
# reach into the core is a decision, and an entry nobody uses any more is
# said (remove it): the list should only shrink, towards named operations
# of the heap instead of page and segment fields.
CORE_ALLOWED = {
    # take a block, give it back, resize it, its size: the heap's entry
    # points without the API's checks (process.h's proc_heap_*)
    "_scr_heap_malloc": "entry", "_scr_heap_free_block": "entry", "_scr_heap_realloc": "entry",
    "_scr_heap_usable_size": "entry",
    # take a block of a class: the fast paths of malloc.c, and the class
    # queue's first page with its free list and bump index
    "_scr_small_alloc": "take", "_scr_page_alloc": "take", "_scr_class_page": "take",
    "scr_page.free": "take", "scr_page.capacity": "take", "scr_page.reserved": "take",
    # give a block back to its page
    "_scr_small_free": "give",
    # whose block is it: the segment map, a segment's heap and page kinds,
    # the heap's owner (its arena)
    "_scr_segmap_entry": "owner", "_scr_segmap_seg": "owner", "_scr_segmap_mark": "owner",
    "_scr_segmap_fast_mark": "owner", "_scr_segmap_fast_of": "owner", "_scr_segment_of": "owner",
    "_scr_heap_of": "owner", "_scr_heap_owner": "owner", "scr_segment.heap": "owner",
    "scr_segment.kind": "owner", "scr_segment.page_tag4": "owner", "scr_segment.pages": "owner",
    "scr_page.kind": "owner",
    # is the pointer a live block: the misuse screen and the classifier
    "_scr_misuse": "misuse", "_scr_misuse_init": "misuse", "_scr_misuse_what": "misuse",
    "_scr_classify": "misuse", "_scr_block_suspect": "misuse", "_scr_slot_beyond": "misuse",
    "_scr_block_word1": "misuse", "_scr_block_set_word1": "misuse",
    # size classes
    "_scr_class_sizes": "classes", "_scr_class_of": "classes", "_scr_class_x4": "classes", "_scr_class_first": "classes",
    "_scr_realloc_size": "classes", "_scr_realloc_stays": "classes", "_scr_class_aligned": "classes",
    # set up an arena's heap: hooks, owner, what it keeps
    "_scr_heap_set_owner": "setup", "_scr_heap_set_retain_bytes": "setup",
    # give back pages: a heap's interior pages, a detached huge segment
    # (the huge cache's), and the poison mode's walk of free pages
    "_scr_heap_return_interior": "return", "_scr_segment_unmap_detached": "return",
    "_scr_segment_shrink_detached": "return",
    "scr_segment.size": "return", "scr_segment.huge_offset": "return", "scr_segment.next": "return",
    "scr_segment.free_mask": "return",
    # purge up to a time: the decay, its refaults, what a heap could give
    "_scr_heap_decay": "purge", "_scr_heap_trim_decayed": "purge", "_scr_heap_relink_free": "purge", "_scr_heap_refault_bytes": "purge", "_scr_heap_bytes": "purge",
    # reports, statistics, options (core/src/options.c: the one parser)
    "_scr_report": "report", "_scr_verbose": "report", "_scr_assert_fail": "report",
    "_scr_out_put": "report", "_scr_heap_large_bytes": "report", "_scr_owned_peak": "report",
    "_scr_option_find": "options", "_scr_option_parse": "options", "_scr_option_env": "options",
    "_scr_env_option": "options",
    # sample an allocation site (profile.c): the countdown, the sample
    # taken at malloc and dropped at free, the sampler's locks across fork
    "_scr_prof_due": "profile", "_scr_prof_next": "profile", "_scr_prof_take": "profile",
    "_scr_prof_free": "profile", "_scr_prof_lock": "profile", "_scr_prof_unlock": "profile",
    # and its reports at exit (profile_report.c: SCRALLOC_PROFILE's files, the top sites)
    "_scr_profile_at_exit": "profile", "_scr_profile_report_top": "profile",
    # the core's OS calls (prim/os.c: counted, with the failure injection)
    "_scr_os_map_aligned": "os", "_scr_os_advise": "os", "_scr_os_page_size": "os", "_scr_os_now_ms": "os",
}
CORE_STRUCTS = ("scr_page", "scr_segment")


def strip(text):
    """The code without comments, strings and character constants."""
    out = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    out = re.sub(r"//[^\n]*", "", out)
    out = re.sub(r'"(\\.|[^"\\\n])*"', '""', out)
    out = re.sub(r"'(\\.|[^'\\\n])*'", "''", out)
    return out


def layer_of(path, text):
    m = re.match(r"\s*/\*(.*?)\*/", text, flags=re.S)
    if not m:
        return None
    found = re.search(r"Layer:\s*([a-z]+)", m.group(1))
    return found.group(1) if found else None


def top_level(code):
    """Chunks of code at brace depth 0: (head, body) pairs, body '' for a
    declaration ending in ';'."""
    chunks, depth, start, i = [], 0, 0, 0
    head = None
    while i < len(code):
        ch = code[i]
        if ch == "#" and depth == 0 and (i == 0 or code[i - 1] == "\n"):
            j = i
            while True:  # a preprocessor line with its continuations
                k = code.find("\n", j)
                if k < 0:
                    k = len(code)
                if code[k - 1] != "\\" or k == len(code):
                    break
                j = k + 1
            chunks.append(("#", code[i:k]))
            i = start = k
            continue
        if ch == "{":
            if depth == 0:
                head = code[start:i]
                body_start = i
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                rest = code[i + 1:]
                m = re.match(r"\s*[A-Za-z_][^;{}]*;|\s*;", rest)  # a struct's declarators
                if m and not re.search(r"\)\s*$", head):
                    chunks.append((head, code[body_start:i + 1] + m.group(0)))
                    i += 1 + m.end()
                    start = i
                    continue
                chunks.append((head, code[body_start:i + 1]))
                start = i + 1
        elif ch == ";" and depth == 0:
            chunks.append((code[start:i + 1], ""))
            start = i + 1
        i += 1
    return chunks


def definitions(name, code, header):
    """{symbol: body} that other files can use."""
    defs = {}
    for head, body in top_level(code):
        if head == "#":
            m = re.match(r"#\s*define\s+([A-Za-z_]\w*)(.*)", body, flags=re.S)
            if m and header:  # a macro defined twice (#if/#else): both bodies
                defs[m.group(1)] = defs.get(m.group(1), "") + m.group(2)
            continue
        h = " ".join(head.split())
        if h.startswith(("typedef", "extern", "_Static_assert")) or "SCR_INTERNAL extern" in h:
            continue
        if body and re.search(r"\)\s*(__attribute__\s*\(\(.*\)\)\s*)?$", h):  # a function
            m = re.search(r"([A-Za-z_]\w*)\s*\((?:[^()]|\([^()]*\))*\)\s*(__attribute__\s*\(\(.*\)\)\s*)?$", h)
            if not m:
                continue
            static = re.search(r"\bstatic\b", h) is not None
            if header and "inline" in h:
                defs[m.group(1)] = body
            elif not static and not header:
                defs[m.group(1)] = body
            continue
        if header or re.search(r"\bstatic\b", h) or "(" in h.split("=")[0]:
            continue
        decl = h.split("=")[0].rstrip(";").strip()
        decl = re.sub(r"__attribute__\s*\(\(.*?\)\)", "", decl)
        decl = re.sub(r"\[[^\]]*\]", "", decl)
        m = re.search(r"([A-Za-z_]\w*)\s*$", decl)
        if m and m.group(1) not in ("struct", "union", "enum"):
            defs[m.group(1)] = body + h
    return defs


def core_internals(process_owned):
    """{symbol: file} of the `_scr_*` the core defines outside process/:
    the .c files' functions and variables, the headers' inlines and
    macros."""
    core = os.path.join(ROOT, "core", "src")
    out = {}
    for sub in ("", "prim"):
        d = os.path.join(core, sub)
        for f in sorted(os.listdir(d)):
            if f.endswith((".c", ".h")):
                code = strip(open(os.path.join(d, f)).read())
                for sym in definitions(f, code, f.endswith(".h")):
                    if sym.startswith("_scr_") and sym not in process_owned:
                        out[sym] = os.path.join(sub, f)
    return out


def struct_fields(text, name):
    """The member names of `typedef struct name {...} name;`."""
    m = re.search(r"typedef struct %s \{(.*?)\n\} %s;" % (name, name), text, re.S)
    fields = set()
    for decl in strip(m.group(1)).split(";"):
        decl = re.sub(r"\[[^\]]*\]", "", re.sub(r"_Alignas\s*\([^)]*\)", "", decl))
        for part in decl.split(","):
            f = re.search(r"([A-Za-z_]\w*)\s*(:\s*\d+)?\s*$", part.strip())
            if f:
                fields.add(f.group(1))
    return fields


def field_uses(code, fields):
    """{"scr_page.free", ...}: the fields of CORE_STRUCTS that code reads or
    writes through a variable (or parameter) declared as a pointer to one,
    and through a segment's pages[i]."""
    var = {}
    for m in re.finditer(r"\b(%s)\s*\*+\s*(?:const\s+)?([A-Za-z_]\w*)\b(?!\s*\()" % "|".join(CORE_STRUCTS), code):
        var[m.group(2)] = m.group(1)
        rest = re.match(r"[^;{)]*", code[m.end():]).group(0)  # int *a, *b: the others too
        for n in re.findall(r",\s*\*+\s*([A-Za-z_]\w*)", rest):
            var[n] = m.group(1)
    out = set()
    for v, t in var.items():
        pat = r"\b%s\b(?:\s*\[[^\]]*\])?\s*(?:->|\.)\s*([A-Za-z_]\w*)(?:\s*\[[^\]]*\]\s*\.\s*([A-Za-z_]\w*))?" % v
        for m in re.finditer(pat, code):
            if m.group(1) in fields[t]:
                out.add(f"{t}.{m.group(1)}")
            if m.group(1) == "pages" and m.group(2) in fields["scr_page"]:
                out.add(f"scr_page.{m.group(2)}")
    return out


def main():
    files = sorted(f for f in os.listdir(DIR) if f.endswith((".c", ".h")))
    texts = {f: open(os.path.join(DIR, f)).read() for f in files}
    codes = {f: strip(t) for f, t in texts.items()}
    errors = []
    layer = {}
    for f in files:
        lay = layer_of(f, texts[f])
        if lay not in LAYERS:
            errors.append(f"{f}: its opening comment names no layer of {LAYERS} (\"Layer: NAME\")")
        layer[f] = lay
    owner = {}
    body = {}
    for f in files:
        for sym, b in definitions(f, codes[f], f.endswith(".h")).items():
            if sym in owner and owner[sym] != f:
                errors.append(f"{sym} defined in {owner[sym]} and {f}")
            owner[sym] = f
            body[sym] = b

    def used(text):
        text = re.sub(r"\b(struct|union|enum)\s+[A-Za-z_]\w*", " ", text)  # a tag is not a use
        return {t for t in IDENT.findall(text) if t in owner}

    # The .c files a header symbol reaches through other header symbols.
    reach_memo = {}

    def reach(sym, seen):
        if sym in reach_memo:
            return reach_memo[sym]
        out = set()
        if owner[sym].endswith(".c"):
            out.add(sym)
        else:
            for t in used(body[sym]):
                if t != sym and t not in seen:
                    out |= reach(t, seen | {sym})
        reach_memo[sym] = out
        return out

    edges = {f: {} for f in files}  # file -> {file: [symbols]}
    for f in files:
        for sym in used(codes[f]):
            targets = {sym} if owner[sym].endswith(".h") or owner[sym].endswith(".c") else set()
            if owner[sym].endswith(".h"):
                if owner[sym] != f:
                    edges[f].setdefault(owner[sym], set()).add(sym)
                targets = reach(sym, frozenset())
            for t in targets:
                g = owner[t]
                if g != f and g.endswith(".c"):
                    edges[f].setdefault(g, set()).add(t)

    rank = {name: i for i, name in enumerate(LAYERS)}
    for f in files:
        for g, syms in sorted(edges[f].items()):
            if layer[f] in rank and layer[g] in rank and rank[layer[g]] > rank[layer[f]]:
                errors.append(f"{f} ({layer[f]}) uses {g} ({layer[g]}), a layer above: {', '.join(sorted(syms))}")

    # core/src/static.c includes the files layer by layer, bottom up: then a
    # file cannot even see the declarations of a layer above it
    unity = open(os.path.join(ROOT, "core", "src", "static.c")).read()
    included = re.findall(r'#include "process/([a-z_]+\.c)"', unity)
    for f in sorted(set(f for f in files if f.endswith(".c")) - set(included)):
        errors.append(f"core/src/static.c does not include process/{f}")
    for a, b in zip(included, included[1:]):
        if a in layer and b in layer and layer[a] in rank and layer[b] in rank and rank[layer[b]] < rank[layer[a]]:
            errors.append(f"core/src/static.c includes {b} ({layer[b]}) after {a} ({layer[a]}): bottom up, please")

    # cycles among the .c files (a header's inlines count as its users' own code)
    graph = {f: {g for g in edges[f] if g.endswith(".c")} for f in files if f.endswith(".c")}
    state, stack = {}, []

    def visit(f):
        state[f] = 1
        stack.append(f)
        for g in sorted(graph[f]):
            if state.get(g) == 1:
                cyc = stack[stack.index(g):] + [g]
                errors.append("cycle: " + " -> ".join(cyc))
            elif g not in state:
                visit(g)
        stack.pop()
        state[f] = 2

    for f in sorted(graph):
        if f not in state:
            visit(f)

    # the core's internals each file uses, against CORE_ALLOWED
    core = core_internals(owner)
    types = open(os.path.join(ROOT, "core", "src", "types.h")).read()
    fields = {t: struct_fields(types, t) for t in CORE_STRUCTS}
    core_uses = {}
    for f in files:
        syms = {t for t in IDENT.findall(codes[f]) if t in core} | field_uses(codes[f], fields)
        core_uses[f] = sorted(syms)
        for sym in core_uses[f]:
            if sym not in CORE_ALLOWED:
                where = core.get(sym, "core/src/types.h")
                errors.append(f"{f} uses the core's {sym} ({where}), which is not in CORE_ALLOWED "
                              "(tests/tools/process_layers.py): use a listed operation, or add it to its group")
    unused = sorted(set(CORE_ALLOWED) - {s for u in core_uses.values() for s in u})

    # each layer's files bottom up (a file after those it uses), headers last
    order, placed = [], set()
    while len(placed) < len(graph):
        ready = sorted(f for f in graph if f not in placed and (graph[f] - {f}) <= placed)
        if not ready:  # a cycle (reported below): the rest as they come
            ready = sorted(f for f in graph if f not in placed)
        order += ready
        placed |= set(ready)
    print("core/src/process layers, top first; in each, its files bottom up")
    print("(a file uses only files before it on its line or on lines below):")
    for name in reversed(LAYERS):
        members = [f for f in order if layer[f] == name] + [f for f in files if f.endswith(".h") and layer[f] == name]
        print(f"  {name:10} {' '.join(members)}")
    print("uses (file -> files):")
    for f in files:
        if f.endswith(".c"):
            print(f"  {f:14} -> {' '.join(sorted(g for g in graph[f])) or '-'}")
    print("core internals used (file -> group: symbols; CORE_ALLOWED lists the groups):")
    for f in files:
        if core_uses[f]:
            groups = {}
            for sym in core_uses[f]:
                groups.setdefault(CORE_ALLOWED.get(sym, "NOT ALLOWED"), []).append(sym)
            print(f"  {f:14} " + "; ".join(f"{g}: {' '.join(v)}" for g, v in sorted(groups.items())))
    if unused:
        print("allowed but used by no file (remove them from CORE_ALLOWED): " + " ".join(unused))
    if errors:
        for e in errors:
            print("error: " + e, file=sys.stderr)
        return 1
    print("acyclic: yes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
