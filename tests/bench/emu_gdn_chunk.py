# Dev check for kernels/cuda/k_gdnc.cu (not a test): emulates, lane by lane,
# the m16n8k8 TF32 fragments k_p_gdnc_prep and k_p_gdnc_scan assemble (the
# three-TF32 products, the chunk's L, T, W, U, A and the scan over chunks)
# in numpy, and compares the outputs o and the final state with the token
# recurrence of the delta rule (target-architecture.md 2) in float64.
# python3 emu_gdn_chunk.py dk dv HK HV n   (e.g. 128 128 2 4 150)
import numpy as np
L = np.arange(32); G = L >> 2; Q = L & 3
f32 = np.float32
def tf32(x):
    x = np.asarray(x, np.float32); b = x.view(np.uint32).astype(np.uint64)
    b = (b + 0x1000) & 0xFFFFE000  # round half away (rna) on magnitude bits
    return b.astype(np.uint32).view(np.float32)
def split(v):
    v = np.asarray(v, np.float32); h = tf32(v); return h, tf32(v - h)
def mma(c, a, b0, b1):  # c: [32,4], a: [32,4] (values), b0,b1: [32]
    A = np.zeros((16, 8)); B = np.zeros((8, 8))
    A[G, Q] = a[:, 0]; A[G + 8, Q] = a[:, 1]; A[G, Q + 4] = a[:, 2]; A[G + 8, Q + 4] = a[:, 3]
    B[Q, G] = b0; B[Q + 4, G] = b1
    C = np.zeros((16, 8)); C[G, 2*Q] = c[:, 0]; C[G, 2*Q+1] = c[:, 1]; C[G+8, 2*Q] = c[:, 2]; C[G+8, 2*Q+1] = c[:, 3]
    D = (A @ B + C).astype(np.float32)
    return np.stack([D[G, 2*Q], D[G, 2*Q+1], D[G+8, 2*Q], D[G+8, 2*Q+1]], 1)
def afrag(sm, o0, o8):
    x = np.stack([sm[o0 + e] for e in range(4)], 1); y = np.stack([sm[o8 + e] for e in range(4)], 1)
    out = []
    for s in range(2):
        vals = np.stack([x[:, 2*s], y[:, 2*s], x[:, 2*s+1], y[:, 2*s+1]], 1)
        out.append(split(vals))
    return out
def bfrag(sm, o, st): return split(np.stack([sm[o + e*st] for e in range(4)], 1))
def bfrag4(sm, o): return split(np.stack([sm[o + e] for e in range(4)], 1))
def mma16(c, a, b):
    bh, bl = b
    for s in range(2):
        ah, al = a[s]
        c = mma(c, al, bh[:, 2*s], bh[:, 2*s+1]); c = mma(c, ah, bl[:, 2*s], bl[:, 2*s+1]); c = mma(c, ah, bh[:, 2*s], bh[:, 2*s+1])
    return c
TG_C, TG_SA, TG_SB, TG_SU = 64, 80, 34, 40
def dkp(dk): return 32 if dk <= 32 else 64 if dk <= 64 else 128
def dvp(dv): return (dv + 31)//32*32

def prep(P, h, c, n, W):
    dk, dv, HK, HV, cd = P['dk'], P['dv'], P['HK'], P['HV'], P['conv_dim']
    DKP = dkp(dk); SQ = DKP + 16; SB = DKP + 2; DVP = dvp(dv)
    sm = np.zeros(2*TG_C*SQ + TG_C*TG_C + TG_C*TG_SA + 4*TG_C, np.float32)
    Qs, Ks, Ls, Ts = 0, TG_C*SQ, 2*TG_C*SQ, 2*TG_C*SQ + TG_C*TG_C
    gs = Ts + TG_C*TG_SA; bs = gs + TG_C; eg = bs + TG_C; ek = eg + TG_C
    kd = HK*dk; kh = h // (HV//HK); nch = (n + 63)//64; t0 = c*64; hc = h*nch + c; nv = min(64, n - t0)
    mix = P['mix']
    for t in range(64):
        for k in range(DKP):
            ok = t < nv and k < dk
            sm[Qs + t*SQ + k] = mix[(t0+t)*cd + kh*dk + k] if ok else 0
            sm[Ks + t*SQ + k] = mix[(t0+t)*cd + kh*dk + k + kd] if ok else 0
    for t in range(64):
        sm[gs+t] = P['lg'][(t0+t)*HV + h] if t < nv else 0; sm[bs+t] = P['beta'][(t0+t)*HV+h] if t < nv else 0
    a0 = sm[gs + 2*L].copy(); a1 = (a0 + sm[gs + 2*L + 1]).astype(f32)
    s = np.cumsum(a1.astype(np.float64)).astype(f32)
    sm[gs + 2*L] = s - a1 + a0; sm[gs + 2*L + 1] = s
    gl = sm[gs + 63]
    for t in range(64): sm[eg+t] = np.exp(sm[gs+t]); sm[ek+t] = np.exp(gl - sm[gs+t])
    W['cgl'][hc] = np.exp(gl)
    for w in range(8):
        mt, nh = w & 3, w >> 2
        G1 = [np.zeros((32, 4), f32) for _ in range(4)]; G2 = [np.zeros((32, 4), f32) for _ in range(4)]
        for kb in range(0, DKP, 16):
            ak = afrag(sm, Ks + (16*mt+G)*SQ + kb + 4*Q, Ks + (16*mt+G+8)*SQ + kb + 4*Q)
            aq = afrag(sm, Qs + (16*mt+G)*SQ + kb + 4*Q, Qs + (16*mt+G+8)*SQ + kb + 4*Q)
            for nt in range(4):
                if 32*nh + 8*nt > 16*mt + 15: continue
                b = bfrag4(sm, Ks + (32*nh + 8*nt + G)*SQ + kb + 4*Q)
                G1[nt] = mma16(G1[nt], ak, b); G2[nt] = mma16(G2[nt], aq, b)
        ao = hc*64*64
        for nt in range(4):
            for hf in range(2):
                for ln in range(32):
                    t = 16*mt + G[ln] + 8*hf; s0 = 32*nh + 8*nt + 2*Q[ln]
                    for e in range(2):
                        d = np.exp(sm[gs+t] - sm[gs+s0+e]) if s0+e <= t else 0
                        sm[Ls + t*64 + s0 + e] = sm[bs+t]*d*G1[nt][ln, 2*hf+e] if s0+e < t else 0
                        W['ca'][ao + t*64 + s0 + e] = d*G2[nt][ln, 2*hf+e]
    qo = hc*64*DKP
    for i in range(64*DKP):
        t, k, kk, s_ = i//DKP, i % DKP, i//64, i % 64
        W['cq'][qo+i] = sm[eg+t]*sm[Qs + t*SQ + k]; W['ckt'][qo+i] = sm[ek+s_]*sm[Ks + s_*SQ + kk]
    KB = Qs
    for cc in range(64):
        for t in range(64):
            acc = f32(0)
            for s_ in range(32*(cc//32), t): acc += sm[Ls + t*64 + s_]*sm[Ts + s_*TG_SA + cc]
            sm[Ts + t*TG_SA + cc] = 1 if t == cc else (0 if t < cc else -acc)
    for i in range(64*DKP):
        s_, k = i//DKP, i % DKP; sm[KB + s_*SB + k] = sm[bs+s_]*sm[eg+s_]*sm[Ks + s_*SQ + k]
    for w in range(8):
        mt, nh = w & 3, w >> 2; NW = DKP//16
        acc = [np.zeros((32, 4), f32) for _ in range(NW)]
        for sb in range(0, 16*mt + 1, 16):
            a = afrag(sm, Ts + (16*mt+G)*TG_SA + sb + 4*Q, Ts + (16*mt+G+8)*TG_SA + sb + 4*Q)
            for j in range(NW):
                acc[j] = mma16(acc[j], a, bfrag(sm, KB + (sb+4*Q)*SB + (nh*NW+j)*8 + G, SB))
        for j in range(NW):
            for hf in range(2):
                o = hc*64*DKP + (16*mt + G + 8*hf)*DKP + (nh*NW+j)*8 + 2*Q
                W['cw'][o] = acc[j][:, 2*hf]; W['cw'][o+1] = acc[j][:, 2*hf+1]
    BV = Ks
    for j0 in range(0, DVP, 32):
        for i in range(64*32):
            s_, jj = i//32, j0 + i % 32
            sm[BV + s_*TG_SB + i % 32] = sm[bs+s_]*mix[(t0+s_)*cd + 2*kd + h*dv + jj] if (s_ < nv and jj < dv) else 0
        for w in range(8):
            mt, nh = w & 3, w >> 2
            acc = [np.zeros((32, 4), f32) for _ in range(2)]
            for sb in range(0, 16*mt + 1, 16):
                a = afrag(sm, Ts + (16*mt+G)*TG_SA + sb + 4*Q, Ts + (16*mt+G+8)*TG_SA + sb + 4*Q)
                for j in range(2):
                    acc[j] = mma16(acc[j], a, bfrag(sm, BV + (sb+4*Q)*TG_SB + (2*nh+j)*8 + G, TG_SB))
            for j in range(2):
                for hf in range(2):
                    o = hc*64*DVP + (16*mt + G + 8*hf)*DVP + j0 + (2*nh+j)*8 + 2*Q
                    W['cu'][o] = acc[j][:, 2*hf]; W['cu'][o+1] = acc[j][:, 2*hf+1]

def scan(P, h, by, n, W, rec_old, rec_new, O):
    dk, dv = P['dk'], P['dv']; DKP = dkp(dk); SQ = DKP + 16; DVP = dvp(dv); R = DKP//32
    MT = R//2 if R >= 2 else 1; NT = 4 if R >= 2 else 2
    P1 = 2*16*SQ + 16*TG_SU; P2 = 16*TG_SA + MT*16*TG_SA
    sm = np.zeros(DKP*TG_SB + 64*TG_SB + 4*(P1+P2), np.float32)
    Ss, Ds = 0, DKP*TG_SB
    j0 = by*32; nch = (n+63)//64; hb = h*dk*dv
    wb = [Ds + 64*TG_SB + w*(P1+P2) for w in range(4)]
    S = {}
    for w in range(4):
        m0 = w*MT if R >= 2 else w >> 1; n0 = 0 if R >= 2 else 2*(w & 1)
        for mi in range(MT):
            for ni in range(NT):
                arr = np.zeros((32, 4), f32)
                for r in range(4):
                    row = (m0+mi)*16 + G + (r >> 1)*8; col = j0 + (n0+ni)*8 + 2*Q + (r & 1)
                    ok = (row < dk) & (col < dv)
                    arr[:, r] = np.where(ok, rec_old[np.where(ok, hb + row*dv + col, 0)], 0)
                S[w, mi, ni] = arr
    def load1(w, c):
        Wb = wb[w]; Qb = Wb + 16*SQ; Ub = Qb + 16*SQ
        r0 = (h*nch + c)*64 + 16*w
        for r in range(16):
            sm[Wb + r*SQ: Wb + r*SQ + DKP] = W['cw'][(r0+r)*DKP:(r0+r+1)*DKP]
            sm[Qb + r*SQ: Qb + r*SQ + DKP] = W['cq'][(r0+r)*DKP:(r0+r+1)*DKP]
            sm[Ub + r*TG_SU: Ub + r*TG_SU + 32] = W['cu'][(r0+r)*DVP + j0:(r0+r)*DVP + j0 + 32]
    def load2(w, c):
        m0 = w*MT if R >= 2 else w >> 1
        Ab = wb[w] + P1; Kb = Ab + 16*TG_SA; hc = h*nch + c
        for r in range(16):
            o = (hc*64 + 16*w + r)*64; sm[Ab + r*TG_SA: Ab + r*TG_SA + 64] = W['ca'][o:o+64]
        for r in range(MT*16):
            o = (hc*DKP + m0*16 + r)*64; sm[Kb + r*TG_SA: Kb + r*TG_SA + 64] = W['ckt'][o:o+64]
    for c in range(nch):
        t0 = c*64
        for w in range(4): load1(w, c); load2(w, c)
        for w in range(4):
            m0 = w*MT if R >= 2 else w >> 1; n0 = 0 if R >= 2 else 2*(w & 1)
            for mi in range(MT):
                for ni in range(NT):
                    for hf in range(2):
                        o = Ss + ((m0+mi)*16 + G + 8*hf)*TG_SB + (n0+ni)*8 + 2*Q
                        sm[o] = S[w, mi, ni][:, 2*hf]; sm[o+1] = S[w, mi, ni][:, 2*hf+1]
        Ostate = {}
        for w in range(4):
            Wb = wb[w]; Qb = Wb + 16*SQ; Ub = Qb + 16*SQ
            D = [np.zeros((32, 4), f32) for _ in range(4)]; Oa = [np.zeros((32, 4), f32) for _ in range(4)]
            for kb in range(0, DKP, 16):
                aw = afrag(sm, Wb + G*SQ + kb + 4*Q, Wb + (G+8)*SQ + kb + 4*Q)
                aq = afrag(sm, Qb + G*SQ + kb + 4*Q, Qb + (G+8)*SQ + kb + 4*Q)
                for nt in range(4):
                    b = bfrag(sm, Ss + (kb + 4*Q)*TG_SB + 8*nt + G, TG_SB)
                    D[nt] = mma16(D[nt], aw, b); Oa[nt] = mma16(Oa[nt], aq, b)
            for nt in range(4):
                for hf in range(2):
                    t = G + 8*hf; col = 8*nt + 2*Q
                    ux = sm[Ub + t*TG_SU + col]; uy = sm[Ub + t*TG_SU + col + 1]
                    sm[Ds + (16*w + t)*TG_SB + col] = ux - D[nt][:, 2*hf]; sm[Ds + (16*w + t)*TG_SB + col + 1] = uy - D[nt][:, 2*hf+1]
            Ostate[w] = Oa
        gl = W['cgl'][h*nch + c]
        for w in range(4):
            m0 = w*MT if R >= 2 else w >> 1; n0 = 0 if R >= 2 else 2*(w & 1)
            Ab = wb[w] + P1; Kb = Ab + 16*TG_SA; Oa = Ostate[w]
            for key in [k for k in S if k[0] == w]: S[key] = (S[key]*gl).astype(f32)
            for sb in range(0, 64, 16):
                b = [bfrag(sm, Ds + (sb + 4*Q)*TG_SB + 8*nt + G, TG_SB) for nt in range(4)]
                if sb <= 16*w:
                    a = afrag(sm, Ab + G*TG_SA + sb + 4*Q, Ab + (G+8)*TG_SA + sb + 4*Q)
                    for nt in range(4): Oa[nt] = mma16(Oa[nt], a, b[nt])
                for mi in range(MT):
                    a = afrag(sm, Kb + (mi*16 + G)*TG_SA + sb + 4*Q, Kb + (mi*16 + G + 8)*TG_SA + sb + 4*Q)
                    for ni in range(NT):
                        S[w, mi, ni] = mma16(S[w, mi, ni], a, b[n0 + ni])
            for nt in range(4):
                for hf in range(2):
                    t = t0 + 16*w + G + 8*hf; col = j0 + 8*nt + 2*Q
                    for e in range(2):
                        ok = (t < n) & (col + e < dv)
                        for ln in np.nonzero(ok)[0]:
                            O[t[ln]*P['VS'] + h*dv + col[ln] + e] = Oa[nt][ln, 2*hf+e]
    for w in range(4):
        m0 = w*MT if R >= 2 else w >> 1; n0 = 0 if R >= 2 else 2*(w & 1)
        for mi in range(MT):
            for ni in range(NT):
                for r in range(4):
                    row = (m0+mi)*16 + G + (r >> 1)*8; col = j0 + (n0+ni)*8 + 2*Q + (r & 1)
                    for ln in range(32):
                        if row[ln] < dk and col[ln] < dv: rec_new[hb + row[ln]*dv + col[ln]] = S[w, mi, ni][ln, r]

def run(dk, dv, HK, HV, n, seed=0):
    rng = np.random.default_rng(seed)
    kd = HK*dk; cd = 2*kd + HV*dv
    mix = rng.standard_normal(n*cd).astype(f32)
    for t in range(n):
        for j in range(HK):
            for off, sc in ((0, 1/np.sqrt(dk)), (kd, 1.0)):
                v = mix[t*cd + off + j*dk: t*cd + off + (j+1)*dk]; v /= np.linalg.norm(v); v *= sc
    beta = (1/(1+np.exp(-rng.standard_normal(n*HV)))).astype(f32)
    lg = (-np.exp(rng.standard_normal(n*HV))*0.3).astype(f32)
    P = dict(dk=dk, dv=dv, HK=HK, HV=HV, conv_dim=cd, mix=mix, beta=beta, lg=lg, VS=HV*dv)
    DKP = dkp(dk); DVP = dvp(dv); nch = (n+63)//64; nc = nch*HV
    W = dict(cw=np.zeros(nc*64*DKP, f32), cq=np.zeros(nc*64*DKP, f32), ckt=np.zeros(nc*64*DKP, f32),
             ca=np.zeros(nc*64*64, f32), cu=np.zeros(nc*64*DVP, f32), cgl=np.zeros(nc, f32))
    rec_old = rng.standard_normal(HV*dk*dv).astype(f32)*0.3
    rec_new = np.zeros_like(rec_old); O = np.zeros(n*HV*dv, f32)
    for h in range(HV):
        for c in range(nch): prep(P, h, c, n, W)
    for h in range(HV):
        for by in range(DVP//32): scan(P, h, by, n, W, rec_old, rec_new, O)
    err_o = 0; err_s = 0
    for h in range(HV):
        kh = h // (HV//HK)
        S = rec_old[h*dk*dv:(h+1)*dk*dv].reshape(dk, dv).astype(np.float64)
        for t in range(n):
            q = mix[t*cd + kh*dk: t*cd + (kh+1)*dk]; k = mix[t*cd + kd + kh*dk: t*cd + kd + (kh+1)*dk]
            v = mix[t*cd + 2*kd + h*dv: t*cd + 2*kd + (h+1)*dv]
            dec = np.exp(lg[t*HV+h]); u = dec*S.T@k; d = beta[t*HV+h]*(v - u); S = dec*S + np.outer(k, d)
            o = S.T@q; og = O[t*HV*dv + h*dv: t*HV*dv + (h+1)*dv]
            err_o = max(err_o, np.abs(og - o).max()/max(np.abs(o).max(), 1e-30))
        sg = rec_new[h*dk*dv:(h+1)*dk*dv].reshape(dk, dv)
        err_s = max(err_s, np.abs(sg - S).max()/np.abs(S).max())
    print(f"dk {dk} dv {dv} HK {HK} HV {HV} n {n}: o rel err {err_o:.2e}, state {err_s:.2e}")

import sys
run(*[int(x) for x in sys.argv[1:6]])
