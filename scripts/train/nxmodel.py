"""nxmodel.py - the Llama architecture Nexus runs, in torch, plus export for `nexus import`.

DESIGN
- Exactly what src/model/context.c computes for arch "llama": token embedding, per layer
  RMSNorm -> attention (GQA, RoPE on the first n_rot dims of each head with adjacent pairs
  (2i, 2i+1), theta_i = base^(-2i/n_rot), the llama.cpp "normal" layout, so q/k need no
  permutation) -> residual, RMSNorm -> SwiGLU (down(silu(gate x) * up x)) -> residual; final
  RMSNorm, untied output matrix. No biases.
- A torch nn.Linear(in, out) weight is [out, in] row-major, which is exactly the GGUF tensor
  with ne = [in, out] (ne[0] = row length): export writes the rows as they are.
- export_nxw writes the tensors in the "NXW1" format that `nexus import` reads: magic "NXW1",
  u32 count, then per tensor u32 name length, name bytes, u32 n_dims, n_dims x i64 ne (GGUF
  order), f32 little-endian data.
- load_checkpoint and write_json: the checkpoint reading and the atomic JSON writing every
  training and evaluation script shares.
"""
import json
import math
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, **kw):
        self.n_vocab = 512
        self.n_layer = 3
        self.n_embd = 64
        self.n_head = 4
        self.n_head_kv = 2
        self.n_ff = 128
        self.n_rot = 8          # rotated dims per head (the rest carry no position)
        self.rope_base = 500.0
        self.rms_eps = 1e-5
        for k, v in kw.items():
            if not hasattr(self, k):
                raise KeyError(k)
            setattr(self, k, v)

    @property
    def head_dim(self):
        return self.n_embd // self.n_head

    def as_dict(self):
        return dict(self.__dict__)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(cfg, n_pos):
    half = cfg.n_rot // 2
    inv = torch.tensor([cfg.rope_base ** (-2.0 * i / cfg.n_rot) for i in range(half)],
                       dtype=torch.float64)
    ang = torch.arange(n_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rope(x, cos, sin, n_rot):
    # x: (B, H, T, D); rotate pairs (2i, 2i+1) of the first n_rot dims.
    xr = x[..., :n_rot]
    x0 = xr[..., 0::2]
    x1 = xr[..., 1::2]
    r0 = x0 * cos - x1 * sin
    r1 = x0 * sin + x1 * cos
    rot = torch.stack((r0, r1), dim=-1).flatten(-2)
    return torch.cat((rot, x[..., n_rot:]), dim=-1)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.attn_norm = RMSNorm(cfg.n_embd, cfg.rms_eps)
        self.wq = nn.Linear(cfg.n_embd, cfg.n_head * hd, bias=False)
        self.wk = nn.Linear(cfg.n_embd, cfg.n_head_kv * hd, bias=False)
        self.wv = nn.Linear(cfg.n_embd, cfg.n_head_kv * hd, bias=False)
        self.wo = nn.Linear(cfg.n_head * hd, cfg.n_embd, bias=False)
        self.ffn_norm = RMSNorm(cfg.n_embd, cfg.rms_eps)
        self.gate = nn.Linear(cfg.n_embd, cfg.n_ff, bias=False)
        self.up = nn.Linear(cfg.n_embd, cfg.n_ff, bias=False)
        self.down = nn.Linear(cfg.n_ff, cfg.n_embd, bias=False)

    def forward(self, x, cos, sin, mask):
        cfg = self.cfg
        B, T, _ = x.shape
        hd = cfg.head_dim
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, cfg.n_head, hd).transpose(1, 2)
        k = self.wk(h).view(B, T, cfg.n_head_kv, hd).transpose(1, 2)
        v = self.wv(h).view(B, T, cfg.n_head_kv, hd).transpose(1, 2)
        q = apply_rope(q, cos, sin, cfg.n_rot)
        k = apply_rope(k, cos, sin, cfg.n_rot)
        g = cfg.n_head // cfg.n_head_kv
        if g > 1:
            k = k.repeat_interleave(g, dim=1)
            v = v.repeat_interleave(g, dim=1)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
        att = att.masked_fill(~mask, float("-inf"))
        att = torch.softmax(att, dim=-1)
        o = (att @ v).transpose(1, 2).reshape(B, T, cfg.n_head * hd)
        x = x + self.wo(o)
        h = self.ffn_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def causal_mask(T, sink=None, window=None):
    """(T, T) bool: query t may see key s. With sink/window: only s < sink or t - s < window
    (a local-only cache: attention sinks plus the recent window)."""
    t = torch.arange(T)[:, None]
    s = torch.arange(T)[None, :]
    m = s <= t
    if window is not None:
        m = m & ((s < sink) | (t - s < window))
    return m


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_embd = nn.Embedding(cfg.n_vocab, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm = RMSNorm(cfg.n_embd, cfg.rms_eps)
        self.output = nn.Linear(cfg.n_embd, cfg.n_vocab, bias=False)
        nn.init.normal_(self.tok_embd.weight, std=1.0)
        for b in self.blocks:
            for lin in (b.wq, b.wk, b.wv, b.gate, b.up):
                nn.init.normal_(lin.weight, std=1.0 / math.sqrt(cfg.n_embd))
            nn.init.normal_(b.wo.weight, std=0.5 / math.sqrt(cfg.n_embd * cfg.n_layer))
            nn.init.normal_(b.down.weight, std=0.5 / math.sqrt(cfg.n_ff * cfg.n_layer))
        nn.init.normal_(self.output.weight, std=1.0 / math.sqrt(cfg.n_embd))

    def forward(self, tokens, mask=None, where=None):
        """Logits (B, T, n_vocab); with where (a bool (B, T) mask) only at those positions,
        as (n, n_vocab) in row-major order (training needs logits at answer positions only)."""
        B, T = tokens.shape
        cos, sin = rope_tables(self.cfg, T)
        if mask is None:
            mask = causal_mask(T)
        x = self.tok_embd(tokens)
        for b in self.blocks:
            x = b(x, cos, sin, mask)
        if where is not None:
            x = x[where]
        return self.output(self.norm(x))

    def gguf_tensors_live(self):
        """(name, ne in GGUF order, parameter) in llama.cpp naming (the live parameters)."""
        out = [("token_embd.weight", self.tok_embd.weight)]
        for i, b in enumerate(self.blocks):
            p = "blk.%d." % i
            out += [(p + "attn_norm.weight", b.attn_norm.weight),
                    (p + "attn_q.weight", b.wq.weight), (p + "attn_k.weight", b.wk.weight),
                    (p + "attn_v.weight", b.wv.weight),
                    (p + "attn_output.weight", b.wo.weight),
                    (p + "ffn_norm.weight", b.ffn_norm.weight),
                    (p + "ffn_gate.weight", b.gate.weight), (p + "ffn_up.weight", b.up.weight),
                    (p + "ffn_down.weight", b.down.weight)]
        out += [("output_norm.weight", self.norm.weight), ("output.weight", self.output.weight)]
        return [(name, list(reversed(t.shape)), t) for name, t in out]

    def gguf_tensors(self):
        """(name, ne in GGUF order, f32 tensor) in llama.cpp naming, detached copies."""
        res = []
        for name, _, t in self.gguf_tensors_live():
            t = t.detach().float().contiguous()
            ne = list(reversed(t.shape))
            res.append((name, ne, t))
        return res


def export_nxw(model, path):
    import os
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        ts = model.gguf_tensors()
        f.write(b"NXW1")
        f.write(struct.pack("<I", len(ts)))
        for name, ne, t in ts:
            nb = name.encode()
            f.write(struct.pack("<I", len(nb)))
            f.write(nb)
            f.write(struct.pack("<I", len(ne)))
            f.write(struct.pack("<%dq" % len(ne), *ne))
            f.write(t.numpy().astype("<f4").tobytes())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path, cfg_dict=None):
    """(model in eval mode, the checkpoint dict) from a training checkpoint; cfg_dict overrides
    the configuration stored in it."""
    st = torch.load(path)
    model = Model(Config(**(cfg_dict or st["config"])))
    model.load_state_dict(st["model"])
    model.eval()
    return model, st


def write_json(path, obj, indent=None):
    """obj as JSON to path, atomically (a temporary file, then rename)."""
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f, indent=indent)
    os.replace(path + ".tmp", path)
