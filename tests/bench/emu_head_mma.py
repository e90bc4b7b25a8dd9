# Dev check for k_head_mma (not a test): emulates k_head_mma's fragment assembly
# (kernels/rt_head.cuh) against the PTX m16n8k16 layout (f16 A/B, f32 C) in float64 and compares
# with W @ x for nb tokens in a launch of NB (column c of the n-tiles = piece c % P of token c / P;
# NB == 1: the shuffle epilogue, above: the staged one); the x pieces (hi + mid + lo of x * 2^s,
# s per token; P = 2, fp8 only: hi + lo) are checked with it.
# python3 emu_head_mma.py fp8|bf16 [NB nb [P]]
import sys
import numpy as np, ml_dtypes
rng = np.random.default_rng(1)
fmt = sys.argv[1] if len(sys.argv) > 1 else 'fp8'   # fp8: f16 MMA; bf16: bf16 MMA
NB = int(sys.argv[2]) if len(sys.argv) > 2 else 1
nb = int(sys.argv[3]) if len(sys.argv) > 3 else NB
NP = int(sys.argv[4]) if len(sys.argv) > 4 else 3   # pieces a token (2: fp8 only)
assert NP == 3 or (NP == 2 and fmt == 'fp8')
NT = (NP * NB + 7) // 8
rows, cols = 48, 256                     # 3 tiles, 4 bands
if fmt == 'fp8':
    Wb = rng.integers(0, 256, size=(rows, cols), dtype=np.uint8)
    Wb[(Wb & 0x7F) == 0x7F] = 0          # no NaN codes
    Wf = Wb.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    P = np.float16
else:
    Wf = rng.standard_normal((rows, cols)).astype(ml_dtypes.bfloat16).astype(np.float64)
    P = ml_dtypes.bfloat16
X = [(rng.standard_normal(cols) * np.exp(rng.uniform(-6, 3, cols))).astype(np.float32) for _ in range(nb)]
planes, shifts = [], []
for x in X:
    m = np.max(np.abs(x)); s = 14 - int(np.floor(np.log2(m)))
    v = np.ldexp(x, s).astype(np.float32)
    hi = v.astype(P); r1 = (v - hi.astype(np.float32)).astype(np.float32)
    mid = r1.astype(P); lo = (r1 - mid.astype(np.float32)).astype(np.float32).astype(P)
    if NP == 2: lo = r1.astype(P); planes += [hi, lo]
    else: planes += [hi, mid, lo]
    shifts.append(s)
Y = np.zeros((nb, rows))
for tile in range(rows // 16):
    acc = {(lane, n): [0.0] * 4 for lane in range(32) for n in range(NT)}
    for b in range(cols // 64):
        for n in range(NT):
            regsA, regsB = {}, {}
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                c = b * 64 + t * 16
                ra = Wf[tile * 16 + g, c:c + 16]; rb = Wf[tile * 16 + g + 8, c:c + 16]
                col = 8 * n + g   # the lane's B column: plane col if its token is in the launch
                xs = planes[col][c:c + 16].astype(np.float64) if col // NP < nb else np.zeros(16)
                for j in range(4):
                    regsA[(lane, j)] = [ra[4*j:4*j+2], rb[4*j:4*j+2], ra[4*j+2:4*j+4], rb[4*j+2:4*j+4]]
                    regsB[(lane, j)] = [xs[4*j:4*j+2], xs[4*j+2:4*j+4]]
            for j in range(4):
                A = np.zeros((16, 16)); B = np.zeros((16, 8))
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    ar = regsA[(lane, j)]
                    for i in range(8):  # spec: row g for i<2 or 4<=i<6, else g+8; col 2t+(i&1) (+8 if i>=4)
                        row = g if (i < 2 or 4 <= i < 6) else g + 8
                        A[row, 2 * t + (i & 1) + (8 if i >= 4 else 0)] = ar[i // 2][i & 1]
                    br = regsB[(lane, j)]
                    for i in range(4):  # spec: row 2t+(i&1) (+8 if i>=2), col g
                        B[2 * t + (i & 1) + (8 if i >= 2 else 0), g] = br[i // 2][i & 1]
                D = A @ B
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    for i in range(4):  # spec: row g (i<2) or g+8, col 2t+(i&1)
                        acc[(lane, n)][i] += D[g if i < 2 else g + 8, 2 * t + (i & 1)]
    if NB == 1:  # the shuffle epilogue
        for g in range(8):
            Y[0, tile*16 + g] = (acc[(g*4, 0)][0] + acc[(g*4, 0)][1] + acc[(g*4+1, 0)][0]) * 2.0 ** -shifts[0]
            Y[0, tile*16 + g + 8] = (acc[(g*4, 0)][2] + acc[(g*4, 0)][3] + acc[(g*4+1, 0)][2]) * 2.0 ** -shifts[0]
    else:  # the staged epilogue: stage[row][8n + 2t + e], then lane (half, row) sums token half + 2i
        stage = np.full((16, 8 * NT), np.nan)
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            for n in range(NT):
                a = acc[(lane, n)]
                stage[g, 8*n + 2*t], stage[g, 8*n + 2*t + 1] = a[0], a[1]
                stage[g + 8, 8*n + 2*t], stage[g + 8, 8*n + 2*t + 1] = a[2], a[3]
        seen = set()
        for lane in range(32):
            row = lane & 15
            for i in range(NB // 2):
                j = (lane >> 4) + 2 * i
                if j < nb:
                    seen.add((row, j))
                    Y[j, tile*16 + row] = sum(stage[row, NP*j + k] for k in range(NP)) * 2.0 ** -shifts[j]
        assert len(seen) == 16 * nb, "a (row, token) sum missed"
for j, x in enumerate(X):
    # the layout: against W times the token's pieces (what the MMA sums, exactly)
    xp = sum(planes[NP * j + k].astype(np.float64) for k in range(NP)) * 2.0 ** -shifts[j]
    den = np.abs(Wf) @ np.abs(x.astype(np.float64))
    err = np.max(np.abs(Y[j] - Wf @ xp) / den)
    # the pieces: x to 2^-24 of its largest |x| (three), to 2^-23 of each x (two)
    perr = np.max(np.abs(Wf @ xp - Wf @ x.astype(np.float64)) / den)
    print(fmt, f"NB {NB} token {j}/{nb}: layout error {err:.2g}, pieces vs x {perr:.2g} (relative to sum |w x|)")
    assert err < 1e-14, err
    assert perr < 2.0 ** -20, perr
