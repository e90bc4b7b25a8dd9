# Dev check for k_t_attn (not a test): emulates the target's attention split kernel
# (kernels/cuda/k_tattn.cu) lane by lane in float64 against the PTX layouts (m16n8k16 bf16 fragments,
# ldmatrix .x4 with and without .trans): the stages filled by the kernel's row rule (zeros past a step's
# rows for values, a k-step's columns past D zero), q's three bf16 pieces and the softmax weights' pieces
# at the kernel's indices, the scores' two k halves through the red array, the online softmax's running
# maximum, sum and rescale, the output accumulators' (dimension, query row) places; then k_t_comb's merge of
# the splits. Compares every token's every head with causal attention over the BF16 cache in float64;
# prints the largest error relative to the head's output norm (the pieces are exact, so about 1e-7; a wrong
# fragment, index or mask gives order 1).
# python3 emu_tattn.py G D Tn pos0 runs   (runs: the split count a sequence is cut into)
import sys
import numpy as np, ml_dtypes

G, D, Tn, pos0, runs = (int(a) for a in sys.argv[1:6]) if len(sys.argv) > 5 else (8, 256, 4, 150, 2)
rng = np.random.default_rng(3)
np.seterr(invalid='ignore')  # (np.where evaluates exp(-inf - -inf) on the masked side too)
bf = lambda v: np.asarray(v, np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
CH, NS_ST, TR, RS, PS = 64, 3, 32, 64 + 4, 64 + 8
Dp = (D + 15) // 16 * 16
DP, KS = Dp + 8, Dp // 16
NG = (G + 7) // 8
TB = 2 if G > 8 else 4
N = pos0 + Tn
K = bf(rng.standard_normal((N, D)))
V = bf(rng.standard_normal((N, D)))
Q = rng.standard_normal((Tn, G, D)).astype(np.float32).astype(np.float64)
scale = float(np.float32(1.0) / np.sqrt(np.float32(D)))


def split3(v):
    v = np.float32(v)
    h0 = bf(v)
    r1 = np.float32(v - np.float32(h0))
    h1 = bf(r1)
    h2 = bf(np.float32(r1 - np.float32(h1)))
    return h0, h1, h2


def ldsm4(mem, addr, trans):  # addr[l]: flat index of the row lane l gives; -> regs[lane][4][2]
    out = np.zeros((32, 4, 2))
    for T in range(32):
        for i in range(4):
            if trans:
                r0, r1 = mem[addr[8 * i + 2 * (T % 4)] + T // 4], mem[addr[8 * i + 2 * (T % 4) + 1] + T // 4]
            else:
                r0, r1 = mem[addr[8 * i + T // 4] + 2 * (T % 4)], mem[addr[8 * i + T // 4] + 2 * (T % 4) + 1]
            out[T, i] = (r0, r1)
    return out


def mma(acc, a, b):  # acc[lane][4] += A B: a[lane][4][2], b[lane][2][2]
    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    for l in range(32):
        g, t = l >> 2, l & 3
        A[g, 2 * t:2 * t + 2], A[g + 8, 2 * t:2 * t + 2] = a[l, 0], a[l, 1]
        A[g, 2 * t + 8:2 * t + 10], A[g + 8, 2 * t + 8:2 * t + 10] = a[l, 2], a[l, 3]
        B[2 * t:2 * t + 2, g], B[2 * t + 8:2 * t + 10, g] = b[l, 0], b[l, 1]
    Dm = A @ B
    for l in range(32):
        g, t = l >> 2, l & 3
        acc[l] += (Dm[g, 2 * t], Dm[g, 2 * t + 1], Dm[g + 8, 2 * t], Dm[g + 8, 2 * t + 1])


def mma_tiles(acc, a, pieces, stride, kk, nr):  # tq_mma_tiles: acc[r] += A B of each row tile r < nr
    for r in range(nr):
        for pc in range(3):
            b = np.zeros((32, 2, 2))
            for l in range(32):
                g, t = l >> 2, l & 3
                i = (pc * TR + 8 * r + g) * stride + 16 * kk + 2 * t
                b[l, 0], b[l, 1] = pieces[i:i + 2], pieces[i + 8:i + 10]
            mma(acc[r], a, b)


def split_len(n, runs):
    c = ((n + runs - 1) // runs + CH - 1) // CH * CH
    return max(c, CH)


C = split_len(N, runs)
nsplit = (N + C - 1) // C
pacc = np.zeros((Tn, G, nsplit, D))
pm = np.full((Tn, G, nsplit), -np.inf)
pl = np.zeros((Tn, G, nsplit))
for u0 in range(0, Tn, TB):
    nu = min(TB, Tn - u0)
    nr = nu * NG
    for s in range(nsplit):
        lo, last = s * C, pos0 + u0 + nu - 1
        if lo > last:
            continue
        n = min(lo + C - 1, last) - lo + 1
        nch = (n + CH - 1) // CH
        stg = np.full(NS_ST * CH * DP, np.nan)  # stale shared memory: NaN
        for i in range(NS_ST * CH):
            stg[i * DP + D:i * DP + Dp] = 0.0
        qp = np.full(3 * TR * DP, np.nan)
        red = np.zeros(2 * TR * RS)
        pp = np.full(3 * TR * PS, np.nan)

        def fill(L):
            c = L >> 1
            if c >= nch:
                return
            p0 = lo + c * CH
            nc = min(CH, n - c * CH)
            src = V if L & 1 else K
            base = (L % NS_ST) * CH * DP
            for r in range(CH):
                if r < nc:
                    stg[base + r * DP:base + r * DP + D] = src[p0 + r]
                elif L & 1:
                    stg[base + r * DP:base + r * DP + D] = 0.0

        for L in range(NS_ST):
            fill(L)
        for q in range(8 * nr):
            r = q >> 3
            ut, h = r // NG, r % NG * 8 + (q & 7)
            for d in range(Dp):
                v = Q[u0 + ut, h, d] if (ut < nu and h < G and d < D) else 0.0
                for pc, hv in enumerate(split3(v)):
                    qp[(pc * TR + q) * DP + d] = hv
        mrun, lrun, arun = np.full(TR, -np.inf), np.zeros(TR), np.zeros(TR)
        KS2 = (KS + 1) // 2
        MD = Dp // 16
        o = np.zeros((8, 2, 4, 32, 4))
        for c in range(nch):
            p0 = lo + c * CH
            nc = min(CH, n - c * CH)
            ks, vs = (2 * c) % NS_ST * CH * DP, (2 * c + 1) % NS_ST * CH * DP
            for w in range(8):
                mt, kh = w & 3, w >> 2
                k0, k1 = kh * KS2, min(KS, kh * KS2 + KS2)
                sa = np.zeros((4, 32, 4))
                if 16 * mt < nc:
                    for kk in range(k0, k1):
                        a = ldsm4(stg, [ks + (16 * mt + (l & 15)) * DP + 16 * kk + 8 * (l >> 4) for l in range(32)],
                                  False)
                        mma_tiles(sa, a, qp, DP, kk, nr)
                for r in range(4):
                    for l in range(32):
                        g, t = l >> 2, l & 3
                        for e in range(4):
                            red[(kh * TR + 8 * r + 2 * t + (e & 1)) * RS + 16 * mt + g + 8 * (e >> 1)] = sa[r, l, e]
            fill(2 * c + 3)
            for q in range(8 * nr):
                r = q >> 3
                h, qpos = r % NG * 8 + (q & 7), pos0 + u0 + r // NG
                j = np.arange(64)
                on = (h < G) & (j < nc) & (p0 + j <= qpos)
                sv = np.where(on, (red[q * RS + j] + red[(TR + q) * RS + j]) * scale, -np.inf)
                m = sv.max()
                mo = mrun[q]
                mn = max(mo, m)
                al = 0.0 if mo == -np.inf else np.exp(mo - mn)
                x = np.where(on, np.exp(sv - mn), 0.0)
                for jj in range(64):
                    for pc, hv in enumerate(split3(x[jj])):
                        pp[(pc * TR + q) * PS + jj] = hv
                mrun[q], lrun[q], arun[q] = mn, lrun[q] * al + x.sum(), al
            for w in range(8):
                for mi in range(2):
                    md = w + 8 * mi
                    if md >= MD:
                        continue
                    for r in range(4):
                        for l in range(32):
                            t = l & 3
                            for e in range(4):
                                o[w, mi, r, l, e] *= arun[8 * r + 2 * t + (e & 1)]
                    for kk in range(4):
                        if 16 * kk >= nc:
                            break
                        a = ldsm4(stg, [vs + (16 * kk + (l & 7) + 8 * (l >> 4)) * DP + 16 * md + 8 * ((l >> 3) & 1)
                                        for l in range(32)], True)
                        mma_tiles(o[w, mi], a, pp, PS, kk, nr)
            fill(2 * c + 4)
        for w in range(8):
            for mi in range(2):
                md = w + 8 * mi
                if md >= MD:
                    continue
                for r in range(nr):
                    for l in range(32):
                        g, t = l >> 2, l & 3
                        for e in range(4):
                            h, d = r % NG * 8 + 2 * t + (e & 1), 16 * md + g + 8 * (e >> 1)
                            if h < G and d < D:
                                pacc[u0 + r // NG, h, s, d] = o[w, mi, r, l, e]
        for q in range(8 * nr):
            r = q >> 3
            h = r % NG * 8 + (q & 7)
            if h < G:
                pm[u0 + r // NG, h, s], pl[u0 + r // NG, h, s] = mrun[q], lrun[q]

worst = 0.0
for u in range(Tn):
    pos = pos0 + u
    ns = pos // C + 1
    for h in range(G):
        M = pm[u, h, :ns].max()
        f = np.exp(pm[u, h, :ns] - M)
        out = (pacc[u, h, :ns] * f[:, None]).sum(0) / (pl[u, h, :ns] * f).sum()
        sc = K[:pos + 1] @ Q[u, h] * scale
        p = np.exp(sc - sc.max())
        ref = p @ V[:pos + 1] / p.sum()
        worst = max(worst, np.linalg.norm(out - ref) / np.linalg.norm(ref))
print(f"G {G} D {D} Tn {Tn} pos0 {pos0} runs {runs}: split {C}, {nsplit} splits; worst relative error {worst:.3g}")
