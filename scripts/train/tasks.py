"""tasks.py - synthetic long-context retrieval tasks on token ids, seeded and reproducible.

DESIGN
A sequence is BOS, a haystack of random filler tokens with facts "M key value" scattered in
it, then a query region "Q key answer..." at the end. Three tasks (one per sequence):
- mqar: multi-query associative recall (Zoology): n_pairs facts, then n_query queries for
  distinct keys in random order; the answer is the key's value.
- needle: one fact hidden at a uniform depth, one query.
- vt: variable tracking: two interleaved chains "M x1 v", "M x2 x1", ..., "M xc x(c-1)" (each
  in order); the query "Q xc" is answered by the whole chain x(c-1) ... x1 v (each step is one
  recall, so the answer is generated hop by hop, like RULER's VT). Both chains are queried in
  random order from 128 tokens on; at 64 tokens only the first.
Keys, values, fillers and markers are disjoint token sets; targets[t] is the token expected at
t + 1 where position t + 1 is an answer, else -1. query_spans lists, per query, the answer
positions (an instance is correct iff all its answer tokens are the model's top-1 under
teacher forcing, which equals exact-match greedy decoding).
Token ids live in the piece range of the synthetic SentencePiece vocabulary (ids >= 259) that
`nexus mkmodel` writes, so the GGUF's tokenizer loads in the engine.
"""
import numpy as np

BOS = 1
M = 260
Q = 261
KEYS = np.arange(270, 366)    # 96
VALS = np.arange(370, 434)    # 64
FILL = np.arange(440, 504)    # 64
N_VOCAB = 512
TASKS = ("mqar", "needle", "vt")


def _place(rng, n_items, lo, hi, width):
    """n_items non-overlapping start positions of width-token items in [lo, hi)."""
    span = hi - lo - n_items * width
    if span < 0:
        raise ValueError("sequence too short for the facts")
    gaps = np.sort(rng.integers(0, span + 1, size=n_items))
    return lo + gaps + np.arange(n_items) * width


def make_seq(rng, L, task, n_pairs=None):
    seq = rng.choice(FILL, size=L)
    seq[0] = BOS
    facts = []      # (key, value) in sequence order
    queries = []    # (key, [answers])
    if task == "mqar":
        n = n_pairs if n_pairs else int(rng.integers(2, max(3, min(16, (L - 30) // 4)) + 1))
        ks = rng.choice(KEYS, size=n, replace=False)
        vs = rng.choice(VALS, size=n)
        facts = list(zip(ks, vs))
        # from 128 tokens on, every pair is queried (more answers per sequence); the first
        # curriculum stage (64 tokens) queries at most 8
        order = rng.permutation(n)[: min(n, 8) if L <= 64 else n]
        queries = [(ks[i], [vs[i]]) for i in order]
        rng.shuffle(facts)
    elif task == "needle":
        k = rng.choice(KEYS)
        v = rng.choice(VALS)
        facts = [(k, v)]
        queries = [(k, [v])]
    elif task == "vt":
        c = int(rng.integers(1, 4))
        xs = rng.choice(KEYS, size=2 * c, replace=False)
        chains = []
        for j in range(2):
            x = xs[j * c:(j + 1) * c]
            v = rng.choice(VALS)
            chains.append([(x[0], v)] + [(x[i], x[i - 1]) for i in range(1, c)])
        # interleave the two chains keeping each chain's order
        a, b = chains
        picks = rng.permutation([0] * len(a) + [1] * len(b))
        ia = ib = 0
        for p in picks:
            if p == 0:
                facts.append(a[ia]); ia += 1
            else:
                facts.append(b[ib]); ib += 1
        queries = []
        for j in range(2):
            x = xs[j * c:(j + 1) * c]
            ans = [x[i] for i in range(c - 2, -1, -1)] + [chains[j][0][1]]
            queries.append((x[c - 1], ans))
        if L <= 64:  # the first curriculum stage asks for the first chain only
            queries = queries[:1]
        elif rng.random() < 0.5:
            queries.reverse()
    else:
        raise ValueError(task)
    qlen = sum(2 + len(a) for _, a in queries)
    qstart = L - qlen
    pos = _place(rng, len(facts), 1, qstart - 1, 3)
    for p, (k, v) in zip(pos, facts):
        seq[p:p + 3] = (M, k, v)
    spans = []
    t = qstart
    for k, ans in queries:
        seq[t] = Q
        seq[t + 1] = k
        span = []
        for j, a in enumerate(ans):
            seq[t + 2 + j] = a
            span.append(t + 2 + j)
        spans.append(span)
        t += 2 + len(ans)
    targets = np.full(L, -1, dtype=np.int64)
    for span in spans:
        for p in span:
            targets[p - 1] = seq[p]
    return seq.astype(np.int64), targets, spans


def make_batch(rng, B, L, task_probs=(0.5, 0.25, 0.25)):
    seqs, tg, tasks, spans = [], [], [], []
    for _ in range(B):
        task = TASKS[int(rng.choice(3, p=task_probs))]
        s, t, sp = make_seq(rng, L, task)
        seqs.append(s); tg.append(t); tasks.append(task); spans.append(sp)
    return np.stack(seqs), np.stack(tg), tasks, spans
