#!/usr/bin/env python3
"""Markdown tables for the README from the JSON files that `nexus eval`, `nexus eval-ruler`,
`nexus eval-efficiency`, `nexus eval-longbench` and `nexus task-eval` write.

usage: python3 scripts/eval_table.py FILE.json [FILE.json ...]

The kind of file is recognised from its fields. For `nexus eval` files the table is followed by
a summary per density x regime: the policies ranked by KL (lower is closer to dense) with the
KV memory each actually held, and where Nexus places.
"""
import json
import sys


def _n(v, f):
    return "n/a" if v is None else format(v, f)


def fmt_pivot(rows, field, f):
    """One table per metric: a row per density x regime x budget rule, a column per policy, the
    value with its paired SE; the bounds (random, bottomk, oracle) first."""
    pols = []
    for r in rows:
        if r['policy'] not in pols:
            pols.append(r['policy'])
    order = [p for p in ('random', 'bottomk', 'oracle') if p in pols] + \
        [p for p in pols if p not in ('random', 'bottomk', 'oracle', 'full')]
    out = [f"`{field}` (paired SE vs `{rows[0]['reference']}`):", "",
           "| density | regime | budget | " + " | ".join(order) + " |",
           "|---|---|---|" + "---|" * len(order)]
    keys = []
    for r in rows:
        k = (r['density'], r['regime'], r['budget'])
        if k not in keys and r['policy'] != 'full':
            keys.append(k)
    for d, g, b in keys:
        cells = []
        for p in order:
            m = [r for r in rows if (r['policy'], r['density'], r['regime'], r['budget']) ==
                 (p, d, g, b)]
            v = m[0].get(field) if m else None
            cells.append("n/a" if v is None else
                         f"{v:{f}} ({_n(m[0].get(field + '_se'), f)})")
        out.append(f"| {d:.1f} | {g} | {b} | " + " | ".join(cells) + " |")
    return out + [""]


def fmt_eval(rows, name):
    """Paired table (differences from the reference with their SE over streams) and, per
    density x regime x budget rule, the policies by KL with the bounds marked."""
    r0 = rows[0]
    out = [f"`{name}`: {r0['streams']} {r0['source']} streams of {r0['stream_len']} tokens "
           f"(prefill scored on the first {r0['scored']} after the prompt), block/sink/recent "
           f"{r0['kv_block']}/{r0['kv_sink']}/{r0['kv_recent']}, {max(r['seeds'] for r in rows)} "
           f"eviction seeds, seed {r0['seed']}; Δ = paired difference from `{r0['reference']}` "
           f"(SE over streams)",
           "",
           "| policy | density | regime | budget | KV held | KL (nats) | ΔKL (SE) | top-1 | Δtop-1 (SE) "
           "| ppl | long range (positions) | Δlong range (SE) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['policy']} | {r['density']:.2f} | {r['regime']} | {r['budget']} | "
                   f"{_n(r['kv_frac'], '.3f')} | {_n(r['kl'], '.4f')} | {_n(r['kl_diff'], '+.4f')} "
                   f"({_n(r['kl_se'], '.4f')}) | {_n(r['top1'], '.3f')} | {_n(r['top1_diff'], '+.3f')} "
                   f"({_n(r['top1_se'], '.3f')}) | {_n(r['ppl'], '.3f')} | {_n(r['longrange'], '.3f')} "
                   f"({r['longrange_positions']}) | {_n(r['longrange_diff'], '+.3f')} "
                   f"({_n(r['longrange_se'], '.3f')}) |")
    out.append("")
    out.append("| density | regime | budget | policies by KL, closest to dense first (KV held) | "
               "Nexus rank (bounds excluded) |")
    out.append("|---|---|---|---|---|")
    keys = []
    for r in rows:
        k = (r['density'], r['regime'], r['budget'])
        if k not in keys:
            keys.append(k)
    bounds = ('random', 'bottomk', 'oracle')
    for d, g, b in keys:
        ev = [r for r in rows if (r['density'], r['regime'], r['budget']) == (d, g, b)
              and r['policy'] != 'full' and r['kl'] is not None]
        ev.sort(key=lambda r: r['kl'])
        names = [r['policy'] for r in ev if r['policy'] not in bounds]
        rank = f"{names.index('nexus') + 1} of {len(names)}" if 'nexus' in names else "-"
        desc = ", ".join((f"**{r['policy']}**" if r['policy'] in bounds else r['policy']) +
                         f" {r['kl']:.4f} ({_n(r['kv_frac'], '.2f')})" for r in ev)
        out.append(f"| {d:.2f} | {g} | {b} | {desc} | {rank} |")
    return out


def fmt_task(rows, name):
    """`nexus task-eval` JSON: per regime (files without one are the prefill regime), accuracy
    (task "all") per policy x density with the paired difference from the reference and its SE,
    KV held, then the per-task accuracies. full (one dense run) heads every regime's table."""
    for r in rows:
        r.setdefault('regime', 'prefill')
    regimes = [g for g in ('prefill', 'stream') if any(r['regime'] == g for r in rows)]
    out = []
    for g in regimes:
        if out:
            out.append("")
        sub = [r for r in rows if r['regime'] in (g, 'any')]
        out += fmt_task_regime(sub, name, g if len(regimes) > 1 or g != 'prefill' else None)
    return out


def fmt_task_regime(rows, name, regime):
    ref = rows[0].get('reference', 'full')
    dens = sorted({r['density'] for r in rows if r['policy'] != 'full'})
    pols = []
    for r in rows:
        if r['policy'] not in pols:
            pols.append(r['policy'])
    tasks = []
    for r in rows:
        if r['task'] != 'all' and r['task'] not in tasks:
            tasks.append(r['task'])
    n = next(r['queries'] for r in rows if r['task'] == 'all')
    head = f"`{name}`" + (f", {regime} regime" if regime else "")
    out = [f"{head}: {n} queries; Δ = paired difference from `{ref}` (SE over queries; "
           f"seed-dependent policies: mean over {max(r.get('seeds', 1) for r in rows)} seeds); "
           f"KV = bytes held after the prompt / dense", "",
           "| policy | " + " | ".join(f"acc @{d:g} | Δ (SE) | KV @{d:g}" for d in dens) + " |",
           "|---|" + "---|---|---|" * len(dens)]
    get = {(r['policy'], r['density'], r['task']): r for r in rows}
    for p in pols:
        cells = []
        for d in dens:
            r = get.get((p, 1.0 if p == 'full' else d, 'all'))
            if r is None:
                cells.append("| | ")
                continue
            cells.append(f"{r['accuracy']:.3f} | {r['diff_vs_reference']:+.3f} ({r['paired_se']:.3f}) | "
                         f"{r['kv_held_bytes_share']:.3f}")
        out.append(f"| {p} | " + " | ".join(cells) + " |")
    out += ["", "| policy | density | " + " | ".join(tasks) + " |",
            "|---|---|" + "---|" * len(tasks)]
    for p in pols:
        for d in ([1.0] if p == 'full' else dens):
            if (p, d, 'all') not in get:
                continue
            out.append(f"| {p} | {d:g} | " + " | ".join(
                f"{get[(p, d, t)]['accuracy']:.3f}" if (p, d, t) in get else "" for t in tasks) + " |")
    return out


def fmt_ruler(doc, name):
    res = doc['results']
    tasks = []
    cfgs = []
    for r in res:
        if r['task'] not in tasks:
            tasks.append(r['task'])
        c = (r['policy'], r['density'], r['regime'])
        if c not in cfgs:
            cfgs.append(c)
    out = [f"`{name}`: target {doc['length']} tokens, {doc['samples']} samples per task, "
           f"{doc['metric']} x 100", "",
           "| policy | density | regime | " + " | ".join(tasks) + " | mean |",
           "|---|---|---|" + "---|" * (len(tasks) + 1)]
    for c in cfgs:
        sc = {r['task']: r['score'] for r in res if (r['policy'], r['density'], r['regime']) == c}
        vals = [sc[t] for t in tasks]
        dens = "1.00" if c[0] == 'full' else f"{c[1]:.2f}"
        out.append(f"| {c[0]} | {dens} | {c[2]} | " + " | ".join(f"{v:.1f}" for v in vals) +
                   f" | {sum(vals) / len(vals):.1f} |")
    if doc.get('skipped'):
        out.append("")
        out.append("Did not fit the target length with this tokenizer: " + ", ".join(doc['skipped']) + ".")
    out.append("")
    out.append("Left out (corpora we do not have): " + "; ".join(doc['left_out']) + ".")
    return out


def fmt_effi(rows, name):
    r0 = rows[0]
    out = [f"`{name}`: {r0['model']}, {r0['threads']} threads, kernels {r0['kernels']}, prompt {r0['prompt']} "
           f"tokens, {r0['regime']} regime", "",
           "| policy | density | generated | context | tok/s | vs full | median ms | p99 ms | KV MiB | vs full | evicting, % |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    full = {r['gen_len']: r for r in rows if r['policy'] == 'full'}
    for r in rows:
        f = full.get(r['gen_len'])
        vs_t = f"{r['tps'] / f['tps']:.2f}x" if f else "-"
        vs_k = f"{r['kv_bytes'] / f['kv_bytes']:.3f}x" if f else "-"
        dens = "-" if r['policy'] == "full" else f"{r['density']:.2f}"
        out.append(f"| {r['policy']} | {dens} | {r['gen_len']} | {r['ctx_len']} | {r['tps']:.1f} | {vs_t} | "
                   f"{r['lat_median_ms']:.2f} | {r['lat_p99_ms']:.2f} | {r['kv_bytes'] / 1048576:.1f} | {vs_k} | "
                   f"{100 * r['evict_share']:.1f} |")
    return out


def fmt_longbench(rows, name):
    ds = []
    cfgs = []
    for r in rows:
        if r['dataset'] not in ds:
            ds.append(r['dataset'])
        c = (r['policy'], r['density'], r['regime'])
        if c not in cfgs:
            cfgs.append(c)
    out = [f"`{name}`", "", "| policy | density | regime | " + " | ".join(ds) + " |",
           "|---|---|---|" + "---|" * len(ds)]
    for c in cfgs:
        sc = {r['dataset']: r['score'] for r in rows if (r['policy'], r['density'], r['regime']) == c}
        out.append(f"| {c[0]} | {c[1]:.2f} | {c[2]} | " +
                   " | ".join("-" if sc[d] is None else f"{sc[d]:.2f}" for d in ds) + " |")
    return out


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 1
    for path in sys.argv[1:]:
        with open(path) as f:
            doc = json.load(f)
        if isinstance(doc, dict) and 'results' in doc:
            lines = fmt_ruler(doc, path)
        elif doc and 'queries' in doc[0]:
            lines = fmt_task(doc, path)
        elif doc and 'kl' in doc[0]:
            lines = fmt_eval(doc, path)
            if 'attn_mass' in doc[0]:
                for field, f in (('kl', '.4f'), ('attn_err', '.4f'), ('attn_mass', '.4f'),
                                 ('longrange', '.3f'), ('kv_frac', '.3f')):
                    lines += [""] + fmt_pivot(doc, field, f)
        elif doc and 'gen_len' in doc[0]:
            lines = fmt_effi(doc, path)
        elif doc and 'dataset' in doc[0]:
            lines = fmt_longbench(doc, path)
        else:
            print(f"{path}: not a nexus eval file", file=sys.stderr)
            return 1
        print("\n".join(lines))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
