# Dev check for k_mvs (not a test): emulates the streamed gate/up's tensor-core consumers
# (kernels/cuda/k_mvs.cu) in float64 against the PTX m16n8k16 layout (f16 A/B, f32 C) and compares
# with the dequantized W @ x: the packed E2M1 bytes (element 2i in the low nibble of byte i) turned
# into E4M3 codes by rt_e2m1_e4m3's bit rule (A: the E2M1 values times 2^-6, unscaled), x written into
# the B-fragment array by the kernel's index rule (u32 j -> chunk, word, even/odd, lane, piece,
# register) as hi + lo f16 pieces of x 2^s and read back by its uint2 index (2 t + piece + 16 wi + 8 eo,
# only by lanes (g, t) with g % 4 == t: B's n column g, the others zero), D's columns 2 t, 2 t + 1 of a
# word pair times the block scales of lanes 2 (t & 1) and 2 (t & 1) + 1 (the kernel's 32-bit scale
# load), the lanes and the two column halves of a 16-row tile summed (k_mvs<2>; k_mvs<1>, up to 1,024
# columns, sums a tile's whole rows in one warp: the same sums, one part), the term weight times 2^(6 - s).
# Prints the largest row error relative to sum |w x| of the row (the pieces carry each x to 2^-22 of
# itself, so at most about 2^-22; a wrong fragment, piece or scale mapping gives order 1).
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
for ch in range(2):
    acc = np.zeros((32, 2))  # lane: rows g, g + 8 (its n columns 2t, 2t + 1, scaled)
    for kc in range(ch * nch, (ch + 1) * nch):
        for wp in range(2):
            D = np.zeros((16, 8))
            for wi in (2 * wp, 2 * wp + 1):
                for eo in range(2):
                    A = np.zeros((16, 16)); B = np.zeros((16, 8))
                    for lane in range(32):
                        g, t = lane >> 2, lane & 3
                        for row in (g, g + 8):
                            off = kc * 64 + t * 16 + 4 * wi
                            q = int.from_bytes(packed[row, off:off + 4].tobytes(), 'little')
                            ev, od = e2m1_e4m3(q)
                            v = od if eo else ev
                            a = [float(np.float16(code(v, k))) for k in range(4)]
                            A[row, 2 * t], A[row, 2 * t + 1], A[row, 2 * t + 8], A[row, 2 * t + 9] = a
                        if (g & 3) == t:
                            u2 = kc * 64 + 2 * t + (g >> 2) + 16 * wi + 8 * eo  # uint2 index
                            B[2 * t, g], B[2 * t + 1, g] = xs[2 * u2]
                            B[2 * t + 8, g], B[2 * t + 9, g] = xs[2 * u2 + 1]
                    D += A @ B
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                for ri, row in enumerate((g, g + 8)):
                    sb4 = sb[row, kc * 8 + 4 * (t & 1): kc * 8 + 4 * (t & 1) + 4]
                    f = sb4.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
                    acc[lane, ri] += D[row, 2 * t] * f[wp] + D[row, 2 * t + 1] * f[2 + wp]
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        out[g] += acc[lane, 0]; out[g + 8] += acc[lane, 1]
out *= 2.0 ** 6 / sc
err = np.max(np.abs(out - ref) / (np.abs(W) @ np.abs(x)))
print('cols %d: largest row error %.3g of sum |w x| (2^-22 = %.3g)' % (cols, err, 2.0 ** -22))
assert err < 2.0 ** -21
