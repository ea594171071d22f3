#!/usr/bin/env python3
# Where a decode step's time goes, from the CSV that a -DSK_TRACE=1 build of
# the kernels writes to $SK_TRACE_OUT when the model is freed (one record per
# block of every decode GEMV and attention launch: %globaltimer at start and
# end, clock64 cycles of its phases). Groups the records into launches, takes
# the second-to-last complete decode step (ended by the output GEMV) and
# prints each launch's start, span, overlap with its predecessor, median and
# largest phase times, then sums per kind of launch. The phase columns are
# named for the GEMVs (wait, prologue, body); an attention record's three
# phases are its keys, its merge (stripes and cluster) and the rest (the
# combine).
#   python3 scripts/decode-trace.py trace.csv [SM clock GHz, default 1.98]
# A -DSK_TRACE=2 build records a GEMV's prologue in its three phases instead
# (x loaded, the norm's reduction, the quantization); TRACE_PHASES=x,norm,quant
# names the columns so.
# TRACE_SM=1 adds, for the step's attention launches, when each SM's blocks
# finish their keys: by the number of the launch's blocks on the SM, the
# latest SMs of the first launch, and whether the same SMs are late in every
# launch (each SM's mean rank in the two halves of the step's launches, and
# their correlation: near 1 if lateness follows the SM, near 0 if random).
# It also gives, for every kind of launch, each SM's mean block end after its
# launch's median end; with GPC_MAP (scripts/gpc-probe.cu's "sm group size"
# lines) the same averaged per group of SMs.
# TRACE_CO=1 adds, for every kind of launch, which later launches had blocks
# resident on the same SM while a block worked (a GEMV block from its wait's
# end, an attention block from its start): the launch right after it is the
# pipeline's design, one two or more launches ahead is a third kernel on the
# SM; the blocks so shared and their work time against the others'.
# TRACE_DRAIN=1 adds, for every kind of launch, its blocks grouped by the
# launch whose block came first on their SM after the SM last held no block
# ("itself" when the SM was empty as the block landed). An SM can change its
# shared memory carveout only while empty, so a block that lands beside the
# blocks of an earlier launch most likely runs in that launch's carveout.
# (run by `scripts/gpu-check.sh run trace`)
import csv, os, sys, statistics as st
P = os.environ.get("TRACE_PHASES", "wait,prologue,body").split(",")
rows = [dict((k, int(v)) for k, v in r.items()) for r in csv.DictReader(open(sys.argv[1]))]
ghz = float(sys.argv[2]) if len(sys.argv) > 2 else 1.98
rows.sort(key=lambda r: r["g0"])
inst, cur = [], {}
for r in rows:
    key = (r["tag"], r["grid"], r["cols"], r["rows"])
    c = cur.get(key)
    if c is None or r["block"] in c["seen"]:
        c = {"key": key, "recs": [], "seen": set()}
        cur[key] = c
        inst.append(c)
    c["recs"].append(r)
    c["seen"].add(r["block"])
inst.sort(key=lambda c: min(r["g0"] for r in c["recs"]))
vocab = max(c["key"][3] for c in inst)
ends = [i for i, c in enumerate(inst) if c["key"][3] == vocab and c["key"][0] != 1000]
print("records", len(rows), "kernels", len(inst), "lm_head at", ends[-6:])
if len(ends) < 3:
    sys.exit("too few steps")
a, b = ends[-3] + 1, ends[-2] + 1
step = inst[a:b]
def name(k):
    tag, grid, cols, rows = k
    if tag == 1000: return "attn"
    return "gemv T%d %dx%d" % (tag, rows, cols)
t_start = min(r["g0"] for r in step[0]["recs"]); t_end = max(r["g1"] for r in step[-1]["recs"])
print("step: %d kernels, %.1f us" % (len(step), (t_end - t_start) / 1e3))
prev_end = None
agg = {}
for k, c in enumerate(step):
    R = c["recs"]
    s0 = min(r["g0"] for r in R); s1 = max(r["g0"] for r in R); e0 = min(r["g1"] for r in R); e1 = max(r["g1"] for r in R)
    us = lambda v: v / ghz / 1e3
    med = lambda f: st.median(f(r) for r in R)
    gap = (s0 - prev_end) / 1e3 if prev_end else 0
    n = name(c["key"])
    line = ("%-22s blocks %4d/%4d  start+%.1f  span %.1f  gap %+.1f  starts over %.1f  ends over %.1f  | " + P[0] + " %.2f " + P[1] + " %.2f " + P[2] + " %.2f (med us) max %.2f / %.2f / %.2f") % (
        n, len(R), c["key"][1], (s0 - t_start) / 1e3, (e1 - s0) / 1e3, gap, (s1 - s0) / 1e3, (e1 - e0) / 1e3,
        us(med(lambda r: r["c1"])), us(med(lambda r: r["c2"])), us(med(lambda r: r["c3"])),
        us(max(r["c1"] for r in R)), us(max(r["c2"] for r in R)), us(max(r["c3"] for r in R)))
    if k < 8 or k == len(step) - 1:  # the first layer and the output GEMV
        print(line)
    a_ = agg.setdefault(n, [0, 0, 0, 0, 0, 0])
    a_[0] += 1; a_[1] += (e1 - s0) / 1e3; a_[2] += gap
    a_[3] += us(med(lambda r: r["c1"])); a_[4] += us(med(lambda r: r["c2"])); a_[5] += us(med(lambda r: r["c3"]))
    prev_end = e1
print("per kind: count, span sum, gap sum, %s medians summed (us)" % "/".join(P))
for n, v in agg.items():
    print(("  %-22s %3d  span %8.1f  gap %7.1f  " + P[0] + " %6.1f " + P[1] + " %6.1f " + P[2] + " %7.1f") % (n, *v))

if os.environ.get("TRACE_SM") == "1":
    att = [c for c in step if c["key"][0] == 1000]
    ranks = []  # per launch: {sm: mean rank of its blocks' keys ends, 0 (first) .. 1 (last)}
    for k, c in enumerate(att):
        R = c["recs"]
        s0 = min(r["g0"] for r in R)
        # (keys end in us after the launch's first start, SM), earliest first
        ends = sorted(((r["g0"] - s0) / 1e3 + r["c1"] / ghz / 1e3, r["sm"]) for r in R)
        by_sm, rk = {}, {}
        for i, (v, sm) in enumerate(ends):
            by_sm.setdefault(sm, []).append(v)
            rk.setdefault(sm, []).append(i / max(1, len(ends) - 1))
        ranks.append({sm: st.mean(v) for sm, v in rk.items()})
        if k == 0:
            print("attention keys ends, first launch (us after its first block's start):")
            for nb in sorted(set(len(v) for v in by_sm.values())):
                last = [max(v) for v in by_sm.values() if len(v) == nb]
                print("  SMs with %d block(s): %3d  latest block's end median %.2f max %.2f" % (nb, len(last), st.median(last), max(last)))
            late = sorted(by_sm.items(), key=lambda kv: -max(kv[1]))[:12]
            print("  latest SMs: " + ", ".join("%d %.2f" % (sm, max(v)) for sm, v in late))
    if len(ranks) >= 4:
        h = len(ranks) // 2
        sms = sorted(set.intersection(*[set(r) for r in ranks]))
        m1 = [st.mean(r[sm] for r in ranks[:h]) for sm in sms]
        m2 = [st.mean(r[sm] for r in ranks[h:]) for sm in sms]
        try:
            corr = "%.2f" % st.correlation(m1, m2)
        except st.StatisticsError as e:
            corr = "undefined (%s)" % e
        print("attention: per-SM mean rank of the keys ends, first half of the step's %d launches against the second: correlation %s over %d SMs" % (len(ranks), corr, len(sms)))
        allm = sorted(((st.mean(r[sm] for r in ranks), sm) for sm in sms), reverse=True)
        print("  latest on average (SM mean rank): " + ", ".join("%d %.2f" % (sm, v) for v, sm in allm[:12]))
        print("  earliest on average: " + ", ".join("%d %.2f" % (sm, v) for v, sm in allm[-8:]))
    # every launch of the step: each block's end relative to its launch's
    # median end (us), per SM averaged over the launches of a kind; with
    # GPC_MAP (scripts/gpc-probe.cu's "sm group size" lines) also per group
    gmap = {}
    if os.environ.get("GPC_MAP"):
        for ln in open(os.environ["GPC_MAP"]):
            f = ln.split()
            if len(f) >= 3:
                gmap[int(f[0])] = (int(f[1]), int(f[2]))
    kinds = {}
    for c in step:
        R = c["recs"]
        med_end = st.median(r["g1"] for r in R)
        k = kinds.setdefault(name(c["key"]), {})
        for r in R:
            k.setdefault(r["sm"], []).append((r["g1"] - med_end) / 1e3)
    print("per kind of launch: each SM's mean block end after its launch's median end (us)")
    for n, by_sm in kinds.items():
        m = sorted((st.mean(v), sm) for sm, v in by_sm.items())
        line = "  %-22s SMs %3d  earliest %+.2f  10%% %+.2f  median %+.2f  90%% %+.2f  latest %+.2f" % (
            n, len(m), m[0][0], m[len(m) // 10][0], m[len(m) // 2][0], m[len(m) * 9 // 10][0], m[-1][0])
        if gmap:
            grp = {}
            for v, sm in m:
                if sm in gmap:
                    grp.setdefault(gmap[sm], []).append(v)
            line += "  | by group(size): " + " ".join("%d(%d) %+.2f" % (g, s, st.mean(v)) for (g, s), v in sorted(grp.items()))
        print(line)

co_on, drain_on = os.environ.get("TRACE_CO") == "1", os.environ.get("TRACE_DRAIN") == "1"
if co_on or drain_on:
    # each SM's blocks in the order they started, with their launch's index
    by_sm = {}
    for k, c in enumerate(step):
        for r in c["recs"]:
            by_sm.setdefault(r["sm"], []).append((r, k))
    for v in by_sm.values():
        v.sort(key=lambda p: p[0]["g0"])
    def work0(r, c):  # when a block's work starts: a GEMV's at its wait's end, an attention block's at its start
        return r["g0"] + (0 if c["key"][0] == 1000 else r["c1"] / ghz)
    def print_groups(group_of, label, order):
        # every block's work time (us), by kind of launch and by group_of(r, c, k), printed in the order given
        groups = {}
        for k, c in enumerate(step):
            for r in c["recs"]:
                groups.setdefault(name(c["key"]), {}).setdefault(group_of(r, c, k), []).append((r["g1"] - work0(r, c)) / 1e3)
        for n, d in groups.items():
            tot = sum(len(v) for v in d.values())
            print("  %-22s " % n + "  ".join("%s: %d blocks (%.1f%%) work median %.2f max %.2f us" % (
                label(g), len(v), 100 * len(v) / tot, st.median(v), max(v)) for g, v in sorted(d.items(), key=order)))
if co_on:
    def ahead(r, c, k):  # how far ahead the farthest later launch with a block beside r's work was (0: none)
        w0 = work0(r, c)
        return min(2, max((k2 - k for o, k2 in by_sm[r["sm"]] if k2 > k and o["g0"] < r["g1"] and o["g1"] > w0), default=0))
    print("per kind of launch: blocks that shared their SM with a later launch while working, by how far ahead")
    print_groups(ahead, lambda f: ("none", "+1", "+2 or more")[f], lambda p: p[0])
if drain_on:
    # one pass per SM in start order: the launch whose block came first after the SM last held no block
    first_of = {}
    for v in by_sm.values():
        first, end = None, None
        for o, k2 in v:
            if end is None or o["g0"] > end:
                first = k2  # the SM was empty before o (or o is its first traced block)
            end = o["g1"] if end is None else max(end, o["g1"])
            first_of[id(o)] = first
    def since(r, c, k):
        first = first_of[id(r)]
        return "itself" if first == k else "%s (%+d)" % (name(step[first]["key"]), first - k)
    print("per kind of launch: blocks by the launch whose block came first on their SM after it last held none")
    print_groups(since, str, lambda p: -len(p[1]))
