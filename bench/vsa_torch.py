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


def vsa(q, k, v, gate, slot_rows, sizes, n_prefix, e, topk, head_chunk):
    """q, k, v, gate [L, H, D] -> [L, H, D]."""
    L, H, D = q.shape
    n_tiles = sizes.numel()
    valid = slot_rows >= 0
    idx = slot_rows.clamp(min=0)

    def tiles(x):  # [nT, E, H, D], pads zero
        return (x[idx] * valid[:, None, None].to(x.dtype)).view(n_tiles, e, H, D)

    qt, kt, vt = tiles(q), tiles(k), tiles(v)
    pool = lambda xt: xt.float().sum(1) / sizes.view(-1, 1, 1)  # [nT, H, D]
    qp, kp, vp = pool(qt), pool(kt), pool(vt)
    scores = torch.einsum("thd,shd->hts", qp, kp) / math.sqrt(D)  # [H, nT, nT]
    out_slots = torch.empty(n_tiles, e, H, D, dtype=q.dtype, device=q.device)
    if n_prefix:
        qpre = qt[:n_prefix].reshape(1, n_prefix * e, H, D).transpose(1, 2)
        o = F.scaled_dot_product_attention(qpre, k[None].transpose(1, 2), v[None].transpose(1, 2))
        out_slots[:n_prefix] = o.transpose(1, 2).reshape(n_prefix, e, H, D)
    top = scores[:, n_prefix:, n_prefix:].topk(topk, dim=-1).indices + n_prefix  # [H, V, k]
    n_video = n_tiles - n_prefix
    prefix_ids = torch.arange(n_prefix, device=q.device).expand(H, n_video, n_prefix)
    sel = torch.cat([prefix_ids, top], -1)  # [H, V, K]
    kh, vh = kt.permute(2, 0, 1, 3), vt.permute(2, 0, 1, 3)  # [H, nT, E, D]
    valid_t = valid.view(n_tiles, e)
    qv = qt[n_prefix:].permute(2, 0, 1, 3)  # [H, V, E, D]
    for h0 in range(0, H, head_chunk):
        h1 = min(H, h0 + head_chunk)
        s = sel[h0:h1]
        hi = torch.arange(h0, h1, device=q.device)[:, None, None]
        kb = kh[hi, s].flatten(2, 3)  # [hc, V, K*E, D]
        vb = vh[hi, s].flatten(2, 3)
        mask = valid_t[s].flatten(2, 3)[:, :, None, :]  # [hc, V, 1, K*E]
        o = F.scaled_dot_product_attention(qv[h0:h1], kb, vb, attn_mask=mask)
        out_slots[n_prefix:, :, h0:h1] = o.permute(1, 2, 0, 3)
    oc = torch.einsum("hts,shd->thd", scores.softmax(-1), vp)  # [nT, H, D]
    row_slot = torch.empty(L, dtype=torch.long, device=q.device)
    row_slot[slot_rows[valid]] = torch.nonzero(valid).squeeze(1)
    out = out_slots.view(-1, H, D)[row_slot].float() + oc[row_slot // e] * gate.float()
    return out.to(q.dtype)


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
    slot_rows, sizes, n_prefix = tiling(g["prefix"], g["grid"], e)
    slot_rows, sizes = slot_rows.to(dev), sizes.to(dev)
    L, H, D = sum(g["prefix"]) + math.prod(g["grid"]), g["heads"], g["head_dim"]
    n_video = sizes.numel() - n_prefix
    topk = max(1, min(math.ceil((1 - a.sparsity) * n_video), n_video))
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
            (f"vsa {a.sparsity}", lambda: vsa(q, k, v, gate, slot_rows, sizes, n_prefix, e, topk, head_chunk), sparse_pairs)]
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
