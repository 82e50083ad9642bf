# The inputs both VSA kernel experiments (bench/vsa_fine_variants.py, bench/vsa_mosaic_draft.py) time
# against upstream's Triton forward: gen_vsa_triton.py --bench's geometries, random bf16 q, k, v in
# upstream's layout and random key lists of one length, with upstream's output and a call that runs it.
import os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "attention", "testdata"))
sys.path.insert(0, os.path.join(HERE, "..", "internal", "xlaext", "testdata"))

import numpy as np

import gen_vsa_triton as G  # noqa: E402

# gen_vsa_triton.py --bench's geometries but Wan at sparsity 0.9, whose lists are half of 0.8's: the
# experiments' device steps keep to their time limits.
GEOMETRIES = {label: G.BENCH_GEOMETRIES[label] for label in ("h3", "wan0.8", "h3_tiling", "wan_tiling")}


class Case:
    # One geometry's inputs: sizes (valid rows of each tile), idx and num (upstream's q2k_index and
    # q2k_num, [1, H, T, K] and [1, H, T]), q, k, v ([1, H, T·64, 128] bf16), want (upstream's output
    # [H, T·64, 128] float32) and upstream() (one call of it, for timing).
    # paired: each even query tile's list is the odd tile's after it too (an even tile count only; else
    # the lists stay as drawn and self.paired is False), so that a kernel may read each listed K/V tile
    # once for both.
    def __init__(self, label, upstream, rng, paired=False):
        import torch
        self.label = label
        self.heads, self.sizes, self.stride = GEOMETRIES[label]
        self.tiles = len(self.sizes)
        self.idx, self.num = G.random_lists(rng, self.heads, self.tiles, self.stride,
                                            np.full((self.heads, self.tiles), self.stride, np.int32))
        self.paired = paired and self.tiles % 2 == 0
        if self.paired:
            self.idx[:, :, 1::2] = self.idx[:, :, 0::2]
        self.q, self.k, self.v = (G.bf16(rng, (1, self.heads, self.tiles * G.T, G.D)) for _ in range(3))
        tq = [torch.from_numpy(np.array(x).view(np.int16)).cuda().view(torch.bfloat16) for x in (self.q, self.k, self.v)]
        lists = [torch.from_numpy(x).cuda() for x in (self.idx, self.num, self.sizes)]
        self.upstream = lambda: upstream(*tq, *lists)[0]
        self.want = self.upstream().float().cpu().numpy()[0]

    def flops(self):
        # Counted at 64 rows a key tile, as gen_vsa_triton.py counts them.
        return 4 * self.heads * self.tiles * self.stride * G.T * G.T * G.D


def parse(ap):
    # Adds --upstream and the geometries to the script's own arguments, parses them and returns them with
    # the cases, made one at a time (each holds its geometry's inputs on the device).
    ap.add_argument("--upstream", required=True, help="folder with upstream's block_sparse_attn_triton.py")
    ap.add_argument("--paired-lists", action="store_true",
                    help="query tiles 2p and 2p+1 list the same key tiles (geometries with an even tile count)")
    ap.add_argument("geometries", nargs="*", default=list(GEOMETRIES), help=" ".join(GEOMETRIES))
    args = ap.parse_args()
    upstream = G.load_upstream(args.upstream)
    rng = np.random.default_rng(1)
    return args, (Case(label, upstream, rng, args.paired_lists) for label in args.geometries)
