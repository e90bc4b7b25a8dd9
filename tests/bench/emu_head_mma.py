# Dev check for k_head_mma (not a test): emulates k_head_mma's fragment assembly
# (kernels/rt_head.cuh) against the PTX m16n8k16 layout (f16 A/B, f32 C) in float64 and compares
# with W @ x; the x pieces (hi + mid + lo of x * 2^s) are checked with it.
# python3 emu_head_mma.py fp8|bf16
import numpy as np, ml_dtypes
rng = np.random.default_rng(1)
import sys
fmt = sys.argv[1] if len(sys.argv) > 1 else 'fp8'   # fp8: f16 MMA; bf16: bf16 MMA
rows, cols = 48, 256                     # 3 tiles, 4 bands
if fmt == 'fp8':
    Wb = rng.integers(0, 256, size=(rows, cols), dtype=np.uint8)
    Wb[(Wb & 0x7F) == 0x7F] = 0          # no NaN codes
    Wf = Wb.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    P = np.float16
else:
    Wf = rng.standard_normal((rows, cols)).astype(ml_dtypes.bfloat16).astype(np.float64)
    P = ml_dtypes.bfloat16
x = (rng.standard_normal(cols) * np.exp(rng.uniform(-6, 3, cols))).astype(np.float32)
m = np.max(np.abs(x)); s = 14 - int(np.floor(np.log2(m)))
v = np.ldexp(x, s).astype(np.float32)
hi = v.astype(P); r1 = (v - hi.astype(np.float32)).astype(np.float32)
mid = r1.astype(P); lo = (r1 - mid.astype(np.float32)).astype(np.float32).astype(P)
pieces = [hi, mid, lo]
def h2(pair):  # two f16 values as a "register": tuple
    return tuple(pair)
y = np.zeros(rows)
for tile in range(rows // 16):
    acc = {lane: [0.0] * 4 for lane in range(32)}
    for b in range(cols // 64):
        # per-lane loads
        regsA, regsB = {}, {}
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            c = b * 64 + t * 16
            ra = Wf[tile * 16 + g, c:c + 16]; rb = Wf[tile * 16 + g + 8, c:c + 16]
            xs = pieces[g][c:c + 16].astype(np.float64) if g < 3 else np.zeros(16)
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
                    col = 2 * t + (i & 1) + (8 if i >= 4 else 0)
                    A[row, col] = ar[i // 2][i & 1]
                br = regsB[(lane, j)]
                for i in range(4):  # spec: row 2t+(i&1) (+8 if i>=2), col g
                    B[2 * t + (i & 1) + (8 if i >= 2 else 0), g] = br[i // 2][i & 1]
            D = A @ B
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                for i in range(4):  # spec: row g (i<2) or g+8, col 2t+(i&1)
                    acc[lane][i] += D[g if i < 2 else g + 8, 2 * t + (i & 1)]
    for g in range(8):
        y[tile*16 + g] = (acc[g*4][0] + acc[g*4][1] + acc[g*4+1][0]) * 2.0 ** -s
        y[tile*16 + g + 8] = (acc[g*4][2] + acc[g*4][3] + acc[g*4+1][2]) * 2.0 ** -s
ref = Wf @ x.astype(np.float64)
err = np.max(np.abs(y - ref) / (np.abs(Wf) @ np.abs(x.astype(np.float64))))
print(fmt, "max error relative to sum |w x|:", err)
assert err < 1e-12, err
