#!/usr/bin/env python3
"""mma_emu.py [PLANT] -- k_kvq_mm's fragment arithmetic (src/backend/cuda/cuda_kvq_mma.cuh,
CINFER_KVQ_DEC=mma) for one warp and one round on the host: the same byte permutes, f16
splits and lane maps, over the PTX ISA's fragment tables of mma.m16n8k16 .f16 (A row: gid,
gid + 8; columns 2 tig (+1) and + 8; B rows 2 tig (+1) and + 8, column gid; C rows gid,
gid + 8, columns 2 tig, 2 tig + 1), products in float64. The scores and the output against a
direct dequantized reference: exit 0 when both agree within 1e-6. PLANT 1..3 plants a
mistake (a wrong selector, a wrong lane for the other half, a wrong group header): it must
fail (exit 1). HG (heads a group: 1, 2 or 4, default 4) and HD (64 or 128, default 128) are the
second and third arguments; 16 positions. A fourth argument "l4" runs k8v4's values instead
(VL4: 4-bit Lloyd-Max records of an f16 scale and 16 bytes of codes a group; km_l4's byte
permutes from the hi / lo tables of 64 cb, two mmas a tile, B = p s, o = C / 64); PLANT 4 (the
signs of the odd codes taken from the wrong bits) and 5 (the nibble interleave skipped) must
fail there."""
import sys
import numpy as np
PLANT = int(sys.argv[1]) if len(sys.argv) > 1 else 0
rng=np.random.default_rng(1)
HG = int(sys.argv[2]) if len(sys.argv) > 2 else 4
HD = int(sys.argv[3]) if len(sys.argv) > 3 else 128
L4 = len(sys.argv) > 4 and sys.argv[4] == "l4"
NG=HD//32; GB=36; HB=NG*GB; LB=18; HBV=NG*LB
def bp(x,y,s):
    src=[(x>>(8*i))&255 for i in range(4)]+[(y>>(8*i))&255 for i in range(4)]
    return sum(src[(s>>(4*i))&7]<<(8*i) for i in range(4))
def h2(u):  # (lo, hi) floats of an f16 pair in u32
    a=np.array([u&0xffff, u>>16],dtype=np.uint16).view(np.float16).astype(np.float64); return a
def pack(lo,hi):
    a=np.array([lo,hi],dtype=np.float16).view(np.uint16).astype(np.uint32); return int(a[0]|(a[1]<<16))
def part(x,p):
    h=float(np.float16(x)); return x-h if p else h
def mma(c,A,B):  # A: per-lane 4 regs, B: per-lane 2 regs, c: per-lane 4 floats
    Am=np.zeros((16,16)); Bm=np.zeros((16,8))
    for l in range(32):
        g,t=l>>2,l&3
        for r,(row,col) in enumerate([(g,2*t),(g+8,2*t),(g,2*t+8),(g+8,2*t+8)]):
            v=h2(A[l][r]); Am[row,col]=v[0]; Am[row,col+1]=v[1]
        for r,k in enumerate([2*t,2*t+8]):
            v=h2(B[l][r]); Bm[k,g]=v[0]; Bm[k+1,g]=v[1]
    C=Am@Bm
    for l in range(32):
        g,t=l>>2,l&3
        c[l][0]+=C[g,2*t]; c[l][1]+=C[g,2*t+1]; c[l][2]+=C[g+8,2*t]; c[l][3]+=C[g+8,2*t+1]
# records: 16 positions, K and V
def mkrec():
    rec=bytearray(HB); vals=np.zeros(HD)
    for g in range(NG):
        d=np.float16(rng.uniform(0.01,0.1)); m=np.float16(rng.uniform(-5,0))
        codes=rng.integers(0,256,32)
        rec[g*GB:g*GB+4]=np.array([d,m],dtype=np.float16).tobytes()
        rec[g*GB+4:g*GB+36]=bytes(codes.astype(np.uint8))
        vals[32*g:32*g+32]=float(m)+float(d)*codes
    return bytes(rec),vals
import os, re
def lm4():
    root=os.path.join(os.path.dirname(os.path.abspath(__file__)),"..","..","..")
    body=re.search(r"kvq_lm4\[16\] = \{(.*?)\};",open(os.path.join(root,"src","backend","kvq_lm.h")).read(),re.S).group(1)
    return np.array([float(x.rstrip("f")) for x in re.findall(r"-?[0-9.]+e[-+][0-9]+f",body)],dtype=np.float32)
CB=lm4()
def mkrec_l4():
    rec=bytearray(HBV); vals=np.zeros(HD)
    for g in range(NG):
        sc=np.float16(rng.uniform(0.05,3.0)); codes=rng.integers(0,16,32)
        rec[g*LB:g*LB+2]=np.array([sc],dtype=np.float16).tobytes()
        rec[g*LB+2:g*LB+18]=bytes(int(codes[2*i])|int(codes[2*i+1])<<4 for i in range(16))
        vals[32*g:32*g+32]=[float(np.float32(np.float32(sc)*CB[c])) for c in codes]
    return bytes(rec),vals
def f16u(v): return int(np.array([v],dtype=np.float16).view(np.uint16)[0])
# c_km_l4 as cu_kvq_decode_init fills it: per table (hi, lo) low bytes of k 0..3, 4..7, high bytes
TBL=[[0,0,0,0],[0,0,0,0]]
for k in range(8):
    v=np.float32(64.0)*CB[8+k]; h=np.float16(v); l=np.float16(np.float32(v)-np.float32(h))
    for t,u in enumerate((f16u(h),f16u(l))):
        TBL[t][k//4]|=(u&255)<<(8*(k%4)); TBL[t][2+k//4]|=(u>>8)<<(8*(k%4))
def km_l4(c0,c1):
    M=0xffffffff
    w=bp(c0,c1,0x5140)
    if PLANT!=5:
        x=((w>>4)^w)&0x00F000F0; w^=x^((x<<4)&M)
    n=((~w&M)>>3)&0x11111111
    s=(w&0x77777777)^((n*7)&M)
    r=[[[0,0],[0,0]],[[0,0],[0,0]]]
    for u in range(2):
        y=bp(w,0,0x3322 if u else 0x1100)
        z=(((y<<4)&M)&0x00800080)|(y&0x80008000)
        if PLANT==4: z=((y<<4)&M)&0x80808080
        sg=(~z&M)&0x80808080
        sel=(s>>(16*u))&0xFFFF
        for t in range(2):
            lo=bp(TBL[t][0],TBL[t][1],sel); hi=bp(TBL[t][2],TBL[t][3],sel)^sg
            r[t][u][0]=bp(lo,hi,0x5140); r[t][u][1]=bp(lo,hi,0x7362)
    return r
def u16(b,off): return int.from_bytes(b[off:off+2],'little')
K=[mkrec() for _ in range(16)]; V=[mkrec_l4() if L4 else mkrec() for _ in range(16)]
def w32(b,off): return int.from_bytes(b[off:off+4],'little')
q=rng.normal(size=(HG,HD))
# prep
qs=np.zeros((HG,HD)); qiv=np.zeros(4); qgs=np.zeros((4,NG))
for h in range(HG):
    mx=np.abs(q[h]).max(); f,e=np.frexp(mx); sc=2.0**(10-e)
    y=q[h]*sc; qs[h]=y; qiv[h]=2.0**(e-10)
    for k in range(NG): qgs[h][k]=sum(part(v,0)+part(v,1) for v in y[32*k:32*k+32])
lanes=range(32)
qb=[[[0,0] for _ in range(HD//16)] for l in lanes]
qsum=[[[0,0] for _ in range(NG)] for l in lanes]; qinv=[[0,0] for l in lanes]
for l in lanes:
    g,t=l>>2,l&3; hh=g&3; p=g>>2; oh0=(2*t)&3; oh1=(2*t+1)&3
    for ks in range(HD//16):
        x=[part(qs[hh][16*ks+4*t+i],p) if hh<HG else 0 for i in range(4)]
        qb[l][ks]=[pack(x[0],x[1]),pack(x[2],x[3])]
    qinv[l]=[qiv[oh0],qiv[oh1]]
    for gi in range(NG): qsum[l][gi]=[qgs[oh0][gi] if t<2 else 0, qgs[oh1][gi] if t<2 else 0]
def c2h(w,s): return bp(w,0x64646464,s)
def c2hc(w,s):
    v=h2(c2h(w,s)); return pack(v[0]-1152,v[1]-1152)
s4=[[0.0]*4 for l in lanes]
for gi in range(NG):
    c=[[0.0]*4 for l in lanes]
    for s in range(2):
        A=[];B=[]
        for l in lanes:
            g,t=l>>2,l&3; off=gi*GB+4+16*s+4*t
            w0=w32(K[g][0],off); w1=w32(K[g+8][0],off)
            A.append([c2hc(w0,0x4140),c2hc(w1,0x4140),c2hc(w0,0x4342 if PLANT!=1 else 0x4140),c2hc(w1,0x4342)]); B.append(qb[l][2*gi+s])
        mma(c,A,B)
    for l in lanes:
        g,t=l>>2,l&3
        dm0=h2(w32(K[g][0],gi*GB)); dm1=h2(w32(K[g+8][0],gi*GB))
        mm0=128*dm0[0]+dm0[1]; mm1=128*dm1[0]+dm1[1]
        s4[l][0]+=dm0[0]*c[l][0]+mm0*qsum[l][gi][0]
        s4[l][1]+=dm0[0]*c[l][1]+mm0*qsum[l][gi][1]
        s4[l][2]+=dm1[0]*c[l][2]+mm1*qsum[l][gi][0]
        s4[l][3]+=dm1[0]*c[l][3]+mm1*qsum[l][gi][1]
full=[[s4[l][i]+s4[l^(2 if PLANT!=2 else 1)][i] for i in range(4)] for l in lanes]
ssc=np.zeros((4,16))
for l in lanes:
    g,t=l>>2,l&3
    if t<2:
        for i in range(4):
            h=2*t+(i&1); j=g+8*(i>>1); ssc[h][j]=full[l][i]*qinv[l][i&1]
ref=np.array([[q[h]@K[j][1] for j in range(16)] for h in range(HG)])
es=np.abs(ssc[:HG]-ref).max()/np.abs(ref).max()
print('scores: max error %.3g of the largest' % es)
# softmax (one round) and values
Pm=np.exp(ref-ref.max(axis=1,keepdims=True))
o=[[[0.0]*4 for _ in range(HD//16)] for l in lanes]; mt=[[0.0]*NG for l in lanes]
pv=[[Pm[(l>>2)&3][j] if ((l>>2)&3)<HG else 0.0 for j in [2*(l&3),2*(l&3)+1,2*(l&3)+8,2*(l&3)+9]] for l in lanes]
for gi in range(NG if L4 else 0):
    As=[[[],[]],[[],[]]]; B=[]
    for l in lanes:
        g,t=l>>2,l&3; p=g>>2; ho=gi*LB; co=ho+2+2*g
        recs=[V[2*t][0],V[2*t+1][0],V[2*t+8][0],V[2*t+9][0]]
        sc=[float(np.frombuffer(r[ho:ho+2],dtype=np.float16)[0]) for r in recs]
        y=[pv[l][i]*sc[i] for i in range(4)]
        B.append([pack(part(y[0],p),part(y[1],p)),pack(part(y[2],p),part(y[3],p))])
        rx=km_l4(u16(recs[0],co),u16(recs[1],co)); ry=km_l4(u16(recs[2],co),u16(recs[3],co))
        for tt in range(2):
            for u in range(2): As[tt][u].append([rx[tt][u][0],rx[tt][u][1],ry[tt][u][0],ry[tt][u][1]])
    for tt in range(2):
        for u in range(2):
            cc=[o[l][2*gi+u] for l in lanes]; mma(cc,As[tt][u],B)
for gi in range(0 if L4 else NG):
    A0=[];A1=[];B=[]
    for l in lanes:
        g,t=l>>2,l&3; p=g>>2; ho=gi*GB
        recs=[V[2*t][0],V[2*t+1][0],V[2*t+8][0],V[2*t+9][0]]
        e=[h2(w32(r,ho if PLANT!=3 else (ho+GB)%HB)) for r in recs]
        y=[pv[l][i]*e[i][0]*64 for i in range(4)]
        B.append([pack(part(y[0],p),part(y[1],p)),pack(part(y[2],p),part(y[3],p))])
        for i in range(4): mt[l][gi]+=pv[l][i]*(e[i][1]-1024*e[i][0])
        co=ho+4+4*g; w=[w32(r,co) for r in recs]
        t01a=bp(w[0],w[1],0x5140); t23a=bp(w[0],w[1],0x7362); t01b=bp(w[2],w[3],0x5140); t23b=bp(w[2],w[3],0x7362)
        A0.append([c2h(t01a,0x4140),c2h(t01a,0x4342),c2h(t01b,0x4140),c2h(t01b,0x4342)])
        A1.append([c2h(t23a,0x4140),c2h(t23a,0x4342),c2h(t23b,0x4140),c2h(t23b,0x4342)])
    c0=[o[l][2*gi] for l in lanes]; c1=[o[l][2*gi+1] for l in lanes]
    mma(c0,A0,B); mma(c1,A1,B)
oo=[[[o[l][i][k]+o[l^2][i][k] for k in range(4)] for i in range(HD//16)] for l in lanes]
mtr=[[sum(mt[(l&~3)|tt][gi] for tt in range(4)) for gi in range(NG)] for l in lanes]
wo=np.zeros((HG,HD))
for l in lanes:
    g,t=l>>2,l&3; oh0=(2*t)&3; oh1=(2*t+1)&3
    if t<2:
        for gi in range(NG):
            m0=mtr[4*oh0][gi]; m1=mtr[4*oh1][gi]
            for u in range(2):
                d0=32*gi+4*g+2*u; c=oo[l][2*gi+u]
                if oh0<HG: wo[oh0][d0]=c[0]/64+m0; wo[oh0][d0+1]=c[2]/64+m0
                if oh1<HG: wo[oh1][d0]=c[1]/64+m1; wo[oh1][d0+1]=c[3]/64+m1
vref=Pm@np.array([V[j][1] for j in range(16)])
ev=np.abs(wo-vref).max()/np.abs(vref).max()
print('output: max error %.3g of the largest' % ev)
sys.exit(0 if es < 1e-6 and ev < 1e-6 else 1)
