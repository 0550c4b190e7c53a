// The tiled matrix product: a workgroup of 256 threads computes a BM x BN block of one batch matrix, each thread a
// TM x TN sub-block held in registers. Every BK steps of k, the workgroup stages a BM x BK slab of A and a BK x BN
// slab of B in workgroup memory, then each thread reads 4-wide vectors of both slabs and does TM x TN fused
// multiply-adds per step of k; the next slabs' elements are fetched into registers meanwhile. Edges are handled by
// loading zeros past m, n and k and storing only inside.
//
// Codegen (src/codegen/matmul.rs) prepends the constants BM BN BK TM TN A_ALONG_K B_ALONG_K, EVEN (the blocks cover
// m, n and k exactly: no fetch is out of bounds), VA and VB (the operand is fetched 16 bytes at a time: an f32 input
// read as it is, contiguous along the axis it is fetched along, every quad of it aligned), the bindings, and:
//   fn sizes() -> vec3<u32>            m, n and k
//   fn batches() -> u32                number of batch matrices
//   fn set_batch(b: u32)               sets the batch coordinates the operand and epilogue functions read
//   fn load_a(row: u32, k: u32, i: u32) -> f32   A's element (its prologue applied); i is the row-major index
//   fn load_b(k: u32, col: u32, i: u32) -> f32   B's element
//   fn load4_a(row: u32, k: u32, base: u32, size: vec3<u32>) -> vec4<f32>   4 elements of A along its contiguous
//                                      axis from (row, k), where VA (load4_b(k, col, ..) likewise, where VB)
//   fn store(row: u32, col: u32, i: u32, folded: f32)   the epilogue and the stores of one output element
//   fn store4(row: u32, col: u32, i: u32, v: vec4<f32>)  4 neighbouring columns' (packed or 16-byte stores)

const THREADS: u32 = 256u;
// Vec4 pitch of one step of k in the slabs: one vector of padding, so the transposing stores hit 32 banks.
const SA: u32 = BM / 4u + 1u;
const SB: u32 = BN / 4u + 1u;
// Threads along n, and the 4-row (4-column) strips of a thread's sub-block, spread BM / RM rows apart.
const TX: u32 = BN / TN;
const RM: u32 = TM / 4u;
const RN: u32 = TN / 4u;

// Slab elements each thread stages per step of k (the last round guarded where the slab is not a multiple of 256);
// where an operand is fetched 16 bytes at a time, as NA / 4 quads (codegen only does so where they divide).
const NA: u32 = (BM * BK + THREADS - 1u) / THREADS;
const NB: u32 = (BK * BN + THREADS - 1u) / THREADS;
const QA: u32 = NA / 4u;
const QB: u32 = NB / 4u;

// Slab element e of A (of B) is read along whichever axis is contiguous in memory, so neighbouring threads read
// neighbouring addresses: its row (column) and step of k in the block.
fn coords_a(e: u32) -> vec2<u32> {
    if (A_ALONG_K) { return vec2<u32>(e / BK, e % BK); }
    return vec2<u32>(e % BM, e / BM);
}
fn coords_b(e: u32) -> vec2<u32> {
    if (B_ALONG_K) { return vec2<u32>(e / BK, e % BK); }
    return vec2<u32>(e % BN, e / BN);
}
// Where element e goes in the slab: the vector and its lane.
fn slot_a(e: u32) -> vec2<u32> {
    let c = coords_a(e);
    return vec2<u32>(c.y * SA + c.x / 4u, c.x % 4u);
}
fn slot_b(e: u32) -> vec2<u32> {
    let c = coords_b(e);
    return vec2<u32>(c.y * SB + c.x / 4u, c.x % 4u);
}
// Element e of A's slab at k0 (B's), 0 past the block's edges and past k.
fn fetch_a(e: u32, m0: u32, k0: u32, base: u32, size: vec3<u32>) -> f32 {
    let c = coords_a(e);
    let gr = m0 + c.x;
    let gk = k0 + c.y;
    if (e < BM * BK && (EVEN || (gr < size.x && gk < size.z))) {
        return load_a(gr, gk, (base + gr) * size.z + gk);
    }
    return 0.0;
}
fn fetch_b(e: u32, n0: u32, k0: u32, base: u32, size: vec3<u32>) -> f32 {
    let c = coords_b(e);
    let gc = n0 + c.x;
    let gk = k0 + c.y;
    if (e < BK * BN && (EVEN || (gc < size.y && gk < size.z))) {
        return load_b(gk, gc, (base + gk) * size.y + gc);
    }
    return 0.0;
}

// Where quad q of A's slab starts (VA), as coords_a gives an element's: 4 elements along k, or along the rows.
fn quad_a(q: u32) -> vec2<u32> {
    if (A_ALONG_K) { return vec2<u32>(q / (BK / 4u), q % (BK / 4u) * 4u); }
    return vec2<u32>(q % (BM / 4u) * 4u, q / (BM / 4u));
}
fn quad_b(q: u32) -> vec2<u32> {
    if (B_ALONG_K) { return vec2<u32>(q / (BK / 4u), q % (BK / 4u) * 4u); }
    return vec2<u32>(q % (BN / 4u) * 4u, q / (BN / 4u));
}
// Quad j of the thread's share of the slabs at k0 (VA, VB: every quad is inside, EVEN).
fn fetch4_a(j: u32, lid: u32, m0: u32, k0: u32, base: u32, size: vec3<u32>) -> vec4<f32> {
    let c = quad_a(lid + j * THREADS);
    return load4_a(m0 + c.x, k0 + c.y, base, size);
}
fn fetch4_b(j: u32, lid: u32, n0: u32, k0: u32, base: u32, size: vec3<u32>) -> vec4<f32> {
    let c = quad_b(lid + j * THREADS);
    return load4_b(k0 + c.y, n0 + c.x, base, size);
}

var<workgroup> slab_a: array<vec4<f32>, BK * SA>;
var<workgroup> slab_b: array<vec4<f32>, BK * SB>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let size = sizes();
    let tiles_m = (size.x + BM - 1u) / BM;
    let tiles_n = (size.y + BN - 1u) / BN;
    let w = wid.x + wid.y * nwg.x;
    let batch = w / (tiles_m * tiles_n);
    // Uniform per workgroup, so the barriers below stay in uniform control flow.
    if (batch >= batches()) { return; }
    set_batch(batch);
    let tile = w % (tiles_m * tiles_n);
    let m0 = (tile / tiles_n) * BM;
    let n0 = (tile % tiles_n) * BN;
    let tx = lid.x % TX;
    let ty = lid.x / TX;
    let base_a = batch * size.x;
    let base_b = batch * size.z;

    // Row 4s + r, column strip q of the thread's sub-block: acc[(4s + r) * RN + q].
    var acc: array<vec4<f32>, TM * RN>;
    // The next slab's elements, fetched into registers before the current slab's products so that the global
    // loads' latency hides behind them, and stored to workgroup memory after the step's second barrier.
    var next_a: array<f32, NA>;
    var next_b: array<f32, NB>;
    for (var j = 0u; j < NA; j++) {
        if (VA) {
            if (j % 4u == 0u) {
                let v = fetch4_a(j / 4u, lid.x, m0, 0u, base_a, size);
                next_a[j] = v.x; next_a[j + 1u] = v.y; next_a[j + 2u] = v.z; next_a[j + 3u] = v.w;
            }
        } else {
            next_a[j] = fetch_a(lid.x + j * THREADS, m0, 0u, base_a, size);
        }
    }
    for (var j = 0u; j < NB; j++) {
        if (VB) {
            if (j % 4u == 0u) {
                let v = fetch4_b(j / 4u, lid.x, n0, 0u, base_b, size);
                next_b[j] = v.x; next_b[j + 1u] = v.y; next_b[j + 2u] = v.z; next_b[j + 3u] = v.w;
            }
        } else {
            next_b[j] = fetch_b(lid.x + j * THREADS, n0, 0u, base_b, size);
        }
    }
    for (var k0 = 0u; k0 < size.z; k0 += BK) {
        // A quad along the slab's rows (columns) is one 16-byte store; along k, 4 stores a slab pitch apart.
        for (var j = 0u; j < NA; j++) {
            if (VA) {
                if (j % 4u == 0u) {
                    let c = quad_a(lid.x + j / 4u * THREADS);
                    if (A_ALONG_K) {
                        for (var t = 0u; t < 4u; t++) { slab_a[(c.y + t) * SA + c.x / 4u][c.x % 4u] = next_a[j + t]; }
                    } else {
                        slab_a[c.y * SA + c.x / 4u] = vec4<f32>(next_a[j], next_a[j + 1u], next_a[j + 2u], next_a[j + 3u]);
                    }
                }
            } else {
                let e = lid.x + j * THREADS;
                if (e < BM * BK) {
                    let at = slot_a(e);
                    slab_a[at.x][at.y] = next_a[j];
                }
            }
        }
        for (var j = 0u; j < NB; j++) {
            if (VB) {
                if (j % 4u == 0u) {
                    let c = quad_b(lid.x + j / 4u * THREADS);
                    if (B_ALONG_K) {
                        for (var t = 0u; t < 4u; t++) { slab_b[(c.y + t) * SB + c.x / 4u][c.x % 4u] = next_b[j + t]; }
                    } else {
                        slab_b[c.y * SB + c.x / 4u] = vec4<f32>(next_b[j], next_b[j + 1u], next_b[j + 2u], next_b[j + 3u]);
                    }
                }
            } else {
                let e = lid.x + j * THREADS;
                if (e < BK * BN) {
                    let at = slot_b(e);
                    slab_b[at.x][at.y] = next_b[j];
                }
            }
        }
        workgroupBarrier();
        if (k0 + BK < size.z) {
            for (var j = 0u; j < NA; j++) {
                if (VA) {
                    if (j % 4u == 0u) {
                        let v = fetch4_a(j / 4u, lid.x, m0, k0 + BK, base_a, size);
                        next_a[j] = v.x; next_a[j + 1u] = v.y; next_a[j + 2u] = v.z; next_a[j + 3u] = v.w;
                    }
                } else {
                    next_a[j] = fetch_a(lid.x + j * THREADS, m0, k0 + BK, base_a, size);
                }
            }
            for (var j = 0u; j < NB; j++) {
                if (VB) {
                    if (j % 4u == 0u) {
                        let v = fetch4_b(j / 4u, lid.x, n0, k0 + BK, base_b, size);
                        next_b[j] = v.x; next_b[j + 1u] = v.y; next_b[j + 2u] = v.z; next_b[j + 3u] = v.w;
                    }
                } else {
                    next_b[j] = fetch_b(lid.x + j * THREADS, n0, k0 + BK, base_b, size);
                }
            }
        }
        for (var kk = 0u; kk < BK; kk++) {
            var a: array<vec4<f32>, RM>;
            var b: array<vec4<f32>, RN>;
            for (var s = 0u; s < RM; s++) {
                a[s] = slab_a[kk * SA + s * (BM / 4u / RM) + ty];
            }
            for (var q = 0u; q < RN; q++) {
                b[q] = slab_b[kk * SB + q * (BN / 4u / RN) + tx];
            }
            for (var s = 0u; s < RM; s++) {
                for (var r = 0u; r < 4u; r++) {
                    for (var q = 0u; q < RN; q++) {
                        let at = (s * 4u + r) * RN + q;
                        acc[at] = fma(vec4<f32>(a[s][r]), b[q], acc[at]);
                    }
                }
            }
        }
        workgroupBarrier();
    }

    // The epilogue of each of the thread's TM x TN outputs, written out by codegen with constant accumulator indices
    // (see `stores` in src/codegen/matmul_stores.rs): a loop here, left rolled by a compiler facing a long epilogue,
    // indexes `acc` at run time and moves it out of registers.
/*STORES*/
}
