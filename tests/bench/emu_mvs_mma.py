# Dev check for k_mvs (not a test): emulates the streamed gate/up's tensor-core consumers
# (kernels/cuda/k_mvs.cu) in float64 against the PTX m16n8k16 layout (f16 A/B, f32 C) and compares
# with the dequantized W @ x: the packed E2M1 bytes (element 2i in the low nibble of byte i) turned
# into E4M3 codes by rt_e2m1_e4m3's bit rule, the codes and block scales as f16 and their product
# rounded to f16 (HMUL2: exact), x written into the B-fragment array by the kernel's index rule
# (u32 j -> chunk, word, even/odd, lane, piece, register) as hi + lo f16 pieces of x 2^s and read back
# by its uint4 index (t + 4 eo + 8 wi), the two column halves of a 16-row tile summed, the term
# weight times 2^(6 - s). Prints the largest row error relative to sum |w x| of the row (the pieces
# carry each x to 2^-22 of itself, so at most about 2^-22; a wrong fragment mapping gives order 1).
# python3 emu_mvs_mma.py [cols [xmax]]
import sys
import numpy as np, ml_dtypes
rng = np.random.default_rng(1)
cols = int(sys.argv[1]) if len(sys.argv) > 1 else 512
xmax = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
assert cols % 256 == 0
R = 16
E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6])
nib = rng.integers(0, 16, size=(R, cols))
packed = (nib[:, 0::2] | nib[:, 1::2] << 4).astype(np.uint8)  # cols / 2 bytes a row
sb = rng.integers(0x20, 0x60, size=(R, cols // 16)).astype(np.uint8)  # E4M3 block scales, no NaN codes
scale = sb.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
W = E2M1[nib] * np.repeat(scale, 16, axis=1)
x = rng.standard_normal(cols) * xmax
x[::7] *= 1e-6  # small entries beside large ones (the pieces' range)
ref = W @ x

def e2m1_e4m3(q):  # rt_e2m1_e4m3 on a 32-bit word: (ev, od) words of four E4M3 codes
    ev = ((q << 2) & 0x1C1C1C1C) | ((q << 4) & 0x80808080)
    od = ((q >> 2) & 0x1C1C1C1C) | (q & 0x80808080)
    return ev & 0xFFFFFFFF, od & 0xFFFFFFFF

def code(v, k):  # byte k of a word of E4M3 codes as a float (the value of the E2M1 nibble times 2^-6)
    return float(np.array([(v >> (8 * k)) & 0xFF], np.uint8).view(ml_dtypes.float8_e4m3fn)[0])

# x's B fragments as the kernel writes them
m = np.max(np.abs(x))
e = int(np.frexp(m)[1])
sc = 2.0 ** (15 - e)
xs = np.zeros((cols, 2))
for j in range(cols):
    rg, pc, t, eo, wi = j & 1, (j >> 1) & 1, (j >> 2) & 3, (j >> 4) & 1, (j >> 5) & 3
    c = (j >> 7) * 128 + 32 * t + 8 * wi + eo + 4 * rg
    for half, cc in enumerate((c, c + 2)):
        v = np.float32(np.float32(x[cc]) * np.float32(sc))
        hi = np.float16(v)
        xs[j, half] = float(np.float16(np.float32(v) - np.float32(hi))) if pc else float(hi)

nch = cols // 256
out = np.zeros(R)
for ch in range(2):  # the tile's two column halves, each its own MMA sums
    dh = np.zeros((16, 8)); dl = np.zeros((16, 8))
    for kc in range(ch * nch, (ch + 1) * nch):
        for wi in range(4):
            for eo in range(2):
                A = np.zeros((16, 16)); Bh = np.zeros((16, 8)); Bl = np.zeros((16, 8))
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    for row in (g, g + 8):
                        off = kc * 64 + t * 16 + 4 * wi  # the word's first byte in the row
                        q = int.from_bytes(packed[row, off:off + 4].tobytes(), 'little')
                        ev, od = e2m1_e4m3(q)
                        v = od if eo else ev
                        s = np.float16(scale[row, kc * 8 + 2 * t + (wi >> 1)])
                        a = [float(np.float16(np.float16(code(v, k)) * s)) for k in range(4)]
                        A[row, 2 * t], A[row, 2 * t + 1], A[row, 2 * t + 8], A[row, 2 * t + 9] = a
                    base = kc * 128 + 4 * (t + 4 * eo + 8 * wi)  # the lane's uint4: hi b0, hi b1, lo b0, lo b1
                    for B, r0 in ((Bh, base), (Bl, base + 2)):
                        B[2 * t, g], B[2 * t + 1, g] = xs[r0]
                        B[2 * t + 8, g], B[2 * t + 9, g] = xs[r0 + 1]
                dh += A @ Bh
                dl += A @ Bl
    assert np.allclose(dh, dh[:, [0]]) and np.allclose(dl, dl[:, [0]])  # every n column the same
    out += dh[:, 0] + dl[:, 0]
out *= 2.0 ** 6 / sc  # the term weight's 2^(6 - s)
err = np.max(np.abs(out - ref) / (np.abs(W) @ np.abs(x)))
print('cols %d: largest row error %.3g of sum |w x| (2^-22 = %.3g)' % (cols, err, 2.0 ** -22))
assert err < 2.0 ** -21
