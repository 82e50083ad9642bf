"""PyTorch baseline of Video Sparse Attention alone, the same math as our sparse graph (attention/vsa.go):
dense SDPA, then VSA at the same geometry: tiles of E rows (prefix segments, then the (4,4,4) video
grid), pooled float32 tile means, per-head top-k video key tiles per video query tile (prefix key tiles
always kept), each query tile's selected K/V tiles gathered and run through SDPA with the pad slots
masked, prefix query tiles dense, plus the gated compression branch softmax(scores)·pooled V·gate.
The routing and tiling follow fastvideo/attention/backends/video_sparse_attn_h3.py (H3) and
video_sparse_attn.py (Wan, no prefix); no FastVideo kernel is used (fastvideo_kernel's Triton/TK
kernels are not installed), so this is the plain-PyTorch cost of the same work.

    python3 bench/vsa_torch.py --geometry h3 --sparsity 0.9    # 832x480x124 + 93 text tokens, 56 heads
    python3 bench/vsa_torch.py --geometry wan --sparsity 0.8   # FastWan2.1-1.3B at 832x480x81, 12 heads
"""

from __future__ import annotations

import argparse
import math
import statistics

import torch
import torch.nn.functional as F

import benchutil

# (text, condition, audio) rows and (t, h, w) token grid. H3: 832x480x124 -> 37 latent frames of 30x52
# latents, patch (1,2,2) -> 37x15x26 tokens; 93 text tokens, 207 audio latents x 2 channels
# (dit/h3/packing). Wan: 81 frames -> 21 latent frames of 60x104, patch (1,2,2) -> 21x30x52.
GEOMETRIES = {
    "h3": dict(prefix=(93, 0, 414), grid=(37, 15, 26), heads=56, head_dim=128),
    "wan": dict(prefix=(), grid=(21, 30, 52), heads=12, head_dim=128),
}
TILE_SHAPES = {64: (4, 4, 4), 256: (4, 8, 8)}


def tiling(prefix, grid, e):
    """slot_rows [nT*E] (row of each slot, -1 for pads), sizes [nT], number of prefix tiles."""
    slots, sizes, row = [], [], 0
    for seg in prefix:
        for start in range(0, seg, e):
            n = min(e, seg - start)
            slots += list(range(row + start, row + start + n)) + [-1] * (e - n)
            sizes.append(n)
        row += seg
    n_prefix = len(sizes)
    gt, gh, gw = grid
    st, sh, sw = TILE_SHAPES[e]
    for t0 in range(0, gt, st):
        for h0 in range(0, gh, sh):
            for w0 in range(0, gw, sw):
                rows = [row + (t * gh + h) * gw + w for t in range(t0, min(t0 + st, gt))
                        for h in range(h0, min(h0 + sh, gh)) for w in range(w0, min(w0 + sw, gw))]
                slots += rows + [-1] * (e - len(rows))
                sizes.append(len(rows))
    return torch.tensor(slots), torch.tensor(sizes, dtype=torch.float32), n_prefix


class Plan:
    """VSA's tiling and routing constants at one geometry, made once: E rows a tile (tiling), top-k video key
    tiles a video query tile (upstream's compute_topk), and the maps between rows and slots."""

    def __init__(self, prefix, grid, e, sparsity, dev):
        slot_rows, sizes, self.n_prefix = tiling(prefix, grid, e)
        self.e = e
        self.slot_rows, self.sizes = slot_rows.to(dev), sizes.to(dev)
        self.block_sizes = self.sizes.to(torch.int32)
        self.valid = self.slot_rows >= 0
        self.idx = self.slot_rows.clamp(min=0)
        self.n_tiles = sizes.numel()
        self.n_video = self.n_tiles - self.n_prefix
        self.topk = max(1, min(math.ceil((1 - sparsity) * self.n_video), self.n_video))
        self.width = self.n_prefix + self.topk
        row_slot = torch.empty(int(self.valid.sum()), dtype=torch.long, device=dev)
        row_slot[self.slot_rows[self.valid]] = torch.nonzero(self.valid).squeeze(1)
        self.row_slot = row_slot


def vsa(q, k, v, gate, plan, fine):
    """q, k, v, gate [L, H, D] -> [L, H, D]. fine(qv, kt, vt, sel, plan) is the fine stage: the video query tiles
    qv [V, E, H, D] over their key tiles sel [H, V, K] of the tiles kt, vt [nT, E, H, D] (pads zero), returning
    [V, E, H, D]: gathered below, or upstream's kernel (bench/h3_dit_torch.py)."""
    L, H, D = q.shape
    nt, e, npre = plan.n_tiles, plan.e, plan.n_prefix
    mask = plan.valid[:, None, None].to(q.dtype)

    def tiles(x):  # [nT, E, H, D], pads zero
        return (x[plan.idx] * mask).view(nt, e, H, D)

    qt, kt, vt = tiles(q), tiles(k), tiles(v)
    pool = lambda xt: xt.float().sum(1) / plan.sizes.view(-1, 1, 1)  # [nT, H, D]
    qp, kp, vp = pool(qt), pool(kt), pool(vt)
    scores = torch.einsum("thd,shd->hts", qp, kp) / math.sqrt(D)  # [H, nT, nT]
    out_slots = torch.empty(nt, e, H, D, dtype=q.dtype, device=q.device)
    if npre:
        qpre = qt[:npre].reshape(1, npre * e, H, D).transpose(1, 2)
        o = F.scaled_dot_product_attention(qpre, k[None].transpose(1, 2), v[None].transpose(1, 2))
        out_slots[:npre] = o.transpose(1, 2).reshape(npre, e, H, D)
    top = scores[:, npre:, npre:].topk(plan.topk, dim=-1).indices + npre  # [H, V, k]
    sel = torch.cat([torch.arange(npre, device=q.device).expand(H, nt - npre, npre), top], -1)  # [H, V, K]
    out_slots[npre:] = fine(qt[npre:], kt, vt, sel, plan)
    oc = torch.einsum("hts,shd->thd", scores.softmax(-1), vp)  # [nT, H, D]
    out = out_slots.view(-1, H, D)[plan.row_slot].float() + oc[plan.row_slot // e] * gate.float()
    return out.to(q.dtype)


def gathered(head_chunk):
    """The fine stage in plain PyTorch: each video query tile's selected K/V tiles gathered, heads head_chunk at
    a time, and run through SDPA with the pad slots masked."""

    def fine(qv, kt, vt, sel, plan):
        n_video, e, H, D = qv.shape
        kh, vh, qh = kt.permute(2, 0, 1, 3), vt.permute(2, 0, 1, 3), qv.permute(2, 0, 1, 3)  # [H, tiles, E, D]
        valid_t = plan.valid.view(plan.n_tiles, e)
        out = torch.empty_like(qv)
        for h0 in range(0, H, head_chunk):
            h1 = min(H, h0 + head_chunk)
            s = sel[h0:h1]
            hi = torch.arange(h0, h1, device=qv.device)[:, None, None]
            kb = kh[hi, s].flatten(2, 3)  # [hc, V, K*E, D]
            vb = vh[hi, s].flatten(2, 3)
            mask = valid_t[s].flatten(2, 3)[:, :, None, :]  # [hc, V, 1, K*E]
            o = F.scaled_dot_product_attention(qh[h0:h1], kb, vb, attn_mask=mask)
            out[:, :, h0:h1] = o.permute(1, 2, 0, 3)
        return out

    return fine


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--geometry", choices=sorted(GEOMETRIES), default="h3")
    ap.add_argument("--sparsity", type=float, default=0.9)
    ap.add_argument("--tile", type=int, choices=sorted(TILE_SHAPES), default=64, help="E (h3 only; Wan's is 64)")
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gather-gib", type=float, default=1.0, help="size of one head chunk of gathered K (or V)")
    a = ap.parse_args()
    g = GEOMETRIES[a.geometry]
    e = 64 if a.geometry == "wan" else a.tile
    dev, dt = benchutil.setup(a.dtype, False, a.seed)
    plan = Plan(g["prefix"], g["grid"], e, a.sparsity, dev)
    n_prefix, n_video, topk = plan.n_prefix, plan.n_video, plan.topk
    L, H, D = sum(g["prefix"]) + math.prod(g["grid"]), g["heads"], g["head_dim"]
    q, k, v, gate = (torch.randn(L, H, D, device=dev, dtype=dt) for _ in range(4))
    per_head = n_video * (n_prefix + topk) * e * D * q.element_size()
    head_chunk = max(1, min(H, int(a.gather_gib * 2**30) // per_head))
    print(f"vsa torch: {a.geometry} geometry, {L} rows, {H} heads x {D}, {a.dtype}; E={e}: {n_prefix} prefix + "
          f"{n_video} video tiles, sparsity {a.sparsity} -> top-{topk}; head chunk {head_chunk}")
    dense_pairs = L * L
    video_rows = math.prod(g["grid"])
    sparse_pairs = (L - video_rows) * L + video_rows * min((n_prefix + topk) * e, L)
    bhsd = lambda x: x[None].transpose(1, 2)
    runs = [("dense", lambda: F.scaled_dot_product_attention(bhsd(q), bhsd(k), bhsd(v)), dense_pairs),
            (f"vsa {a.sparsity}", lambda: vsa(q, k, v, gate, plan, gathered(head_chunk)), sparse_pairs)]
    with torch.no_grad():
        for label, fn, pairs in runs:
            first, times, out = benchutil.time_runs(fn, a.warmup, a.iters, dev)
            tflop = 4 * pairs * H * D / 1e12
            med = statistics.median(times)
            print(f"vsa torch[{label}]: first {first:.3f} s, min {min(times):.4f} s, median {med:.4f} s over "
                  f"{len(times)}; {tflop:.1f} TFLOP -> {tflop / med:.0f} TFLOP/s; output sum {out.float().sum().item():.4g}; "
                  f"peak allocated {torch.cuda.max_memory_allocated() / 2**20 if dev.type == 'cuda' else -1:.0f} MiB")


if __name__ == "__main__":
    main()
