# Dev check for k_attn's MMA path (not a test): emulates, lane by lane, the
# fragments kernels/rt_ops.cuh assembles for the 80B attention shape (8 query
# heads per KV head, head_dim 256, 32-row splits) against the PTX layouts of
# ldmatrix (.x4, with and without .trans) and mma.m16n8k16 (bf16 A/B, f32 C),
# in float64, and compares the scores q . k and the weighted values sum_k p v
# with numpy's. Also checks that the three bf16 pieces of q and of p add up
# to them exactly, so the only difference left is the order of the sums.
# python3 emu_attn_mma.py [n]   (n: the split's rows in use, 1..32)
import sys
import numpy as np, ml_dtypes
rng = np.random.default_rng(3)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 32
G, D, CS, DP = 8, 256, 32, 264
bf = ml_dtypes.bfloat16


def split3(v):  # rt_split3<bf16>: hi, mid, lo, each a round to nearest of what is left (float32)
    v = np.float32(v)
    hi = bf(v); r1 = np.float32(v - np.float32(hi))
    mid = bf(r1); lo = bf(np.float32(r1 - np.float32(mid)))
    return [float(hi), float(mid), float(lo)]


def ldsm4(mem, addr, trans):  # mem: 2-D [row][col] of values; addr[lane] = (row, col) of a matrix row
    regs = {}
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        out = []
        for q in range(4):
            if not trans:  # row g of matrix q, cols 2t, 2t + 1
                r, c = addr[8 * q + g]
                out.append([mem[r][c + 2 * t], mem[r][c + 2 * t + 1]])
            else:  # transposed: element [2t][g], [2t + 1][g] of the stored matrix
                r0, c0 = addr[8 * q + 2 * t]; r1, c1 = addr[8 * q + 2 * t + 1]
                out.append([mem[r0][c0 + g], mem[r1][c1 + g]])
        regs[lane] = out
    return regs


def mma(acc, A, B):  # acc[lane]: 4 floats; A[lane]: 4 regs of 2; B[lane]: 2 regs of 2 (PTX m16n8k16)
    Am = np.zeros((16, 16)); Bm = np.zeros((16, 8))
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for r in range(4):
            row = g + (8 if r & 1 else 0); col = 2 * t + (8 if r & 2 else 0)
            Am[row, col], Am[row, col + 1] = A[lane][r]
        for r in range(2):
            k = 2 * t + (8 if r else 0)
            Bm[k, g], Bm[k + 1, g] = B[lane][r]
    C = Am @ Bm
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        acc[lane][0] += C[g, 2 * t]; acc[lane][1] += C[g, 2 * t + 1]
        acc[lane][2] += C[g + 8, 2 * t]; acc[lane][3] += C[g + 8, 2 * t + 1]


q = (rng.standard_normal((G, D)) * np.exp(rng.uniform(-3, 2, (G, D)))).astype(np.float32)
K = np.full((CS, DP), np.nan); V = np.full((CS, DP), np.nan)  # stale rows past n: NaN
K[:n, :D] = rng.standard_normal((n, D)).astype(bf).astype(np.float64)
V[:n, :D] = rng.standard_normal((n, D)).astype(bf).astype(np.float64)

# scores: warp (mt, kq) = (w % 2, w / 2); bq[kk][p][e] from q
red = np.zeros((4, 8, 36))
for w in range(8):
    mt, kq = w & 1, w >> 1
    bq = {}
    for lane in range(32):
        g8, t8 = lane >> 2, lane & 3
        for kk in range(4):
            for e in range(2):
                d = 64 * kq + 16 * kk + 2 * t8 + 8 * e
                u, v = split3(q[g8, d]), split3(q[g8, d + 1])
                for pc in range(3): bq[(lane, kk, pc, e)] = [u[pc], v[pc]]
    acc = [{lane: [0.0] * 4 for lane in range(32)} for _ in range(3)]
    for kk in range(4):
        addr = [(16 * mt + (l & 15), 64 * kq + 16 * kk + 8 * (l >> 4)) for l in range(32)]
        A = ldsm4(K, addr, False)
        for pc in range(3):
            mma(acc[pc], A, {l: [bq[(l, kk, pc, 0)], bq[(l, kk, pc, 1)]] for l in range(32)})
    for lane in range(32):
        g8, t8 = lane >> 2, lane & 3
        for e in range(4):
            red[kq, 2 * t8 + (e & 1), 16 * mt + g8 + 8 * (e >> 1)] = acc[0][lane][e] + acc[1][lane][e] + acc[2][lane][e]
S = red.sum(axis=0)[:, :32]  # [head][row]
ref = q.astype(np.float64) @ K[:n, :D].T
err_s = np.max(np.abs(S[:, :n] - ref)) / np.max(np.abs(ref))
print(f"scores: max |mma - numpy| / max |score| = {err_s:.3g}")
assert err_s < 1e-12, "scores: layout error"

# values: weights p (float32, 0 past n) as three pieces pp[p][h][row]; V rows past n zeroed
p = np.zeros((G, CS), dtype=np.float32)
p[:, :n] = np.exp(rng.uniform(-20, 0, (G, n))).astype(np.float32)
pp = np.zeros((3, 8, 40))
for h in range(G):
    for r in range(CS):
        pp[:, h, r] = split3(p[h, r])
assert np.array_equal(pp.sum(axis=0)[:, :CS], p.astype(np.float64)), "p's pieces do not add up to p"
V[n:, :] = 0.0
O = np.zeros((G, D))
for w in range(8):
    b = {}
    for lane in range(32):
        g8, t8 = lane >> 2, lane & 3
        for kk in range(2):
            for pc in range(3):
                r = 16 * kk + 2 * t8
                b[(lane, kk, pc)] = [[pp[pc, g8, r], pp[pc, g8, r + 1]], [pp[pc, g8, r + 8], pp[pc, g8, r + 9]]]
    for mt in range(2):
        acc = [{lane: [0.0] * 4 for lane in range(32)} for _ in range(3)]
        for kk in range(2):
            addr = [(16 * kk + (l & 7) + 8 * (l >> 4), 32 * w + 16 * mt + 8 * ((l >> 3) & 1)) for l in range(32)]
            A = ldsm4(V, addr, True)
            for pc in range(3):
                mma(acc[pc], A, {l: b[(l, kk, pc)] for l in range(32)})
        for lane in range(32):
            g8, t8 = lane >> 2, lane & 3
            for e in range(4):
                O[2 * t8 + (e & 1), 32 * w + 16 * mt + g8 + 8 * (e >> 1)] = sum(acc[pc][lane][e] for pc in range(3))
refo = p.astype(np.float64) @ V[:CS, :D]
err_o = np.max(np.abs(O - refo)) / np.max(np.abs(refo))
print(f"values: max |mma - numpy| / max |output| = {err_o:.3g}")
assert err_o < 1e-12, "values: layout error"
print("ok")
