// The f16 matrix product on tensor cores (cooperative matrices, 16 x 16 x 16, f16 operands, f32 accumulators): a
// workgroup of 256 threads, 8 subgroups of 32, computes a BM x BN block of one batch matrix; subgroup (sm, sn) owns
// FM x FN fragments of 16 x 16 outputs, held in cooperative-matrix accumulators.
//
// Every BK steps of k the workgroup stages both operands' slabs in workgroup memory as f16, fetched in octets (8
// halves in a vec4<u32>) along the axis the operand is contiguous along in memory, so global reads are coalesced
// and 16 bytes wide where the operand is a plain f16 tensor; each subgroup then loads its fragments row- or
// column-major to match. The next step's octets are fetched into registers before this step's products, so global
// latency hides behind the tensor cores' work. Edges load zeros, so every fragment is whole; at the end each
// accumulator goes through workgroup memory to the epilogue, which stores only inside m x n.
//
// Codegen (src/codegen/matmul.rs) prepends BM BN BK SGN FM FN, the slab layout (A_ALONG_K, B_ALONG_K; OA OB octets
// of data and SA SB halves in all per slab line; SLAB_A SLAB_B halves per slab), the functions of the tiled kernel
// (sizes, batches, set_batch, store), `octet_a` and `octet_b` (8 elements of an operand from a coordinate, along
// its slab line, prologue applied), and fills in the markers SLABS (the slabs, SW halves an element, and their
// stores), ACCUMULATORS (one `var` per fragment), MULTIPLY (the fragment loads and products of one 16-step of k)
// and EPILOGUE (`drain` of each accumulator).

const THREADS: u32 = 256u;
// Octets of each slab one thread stages per step of k.
const LA: u32 = BM * BK / 8u / THREADS;
const LB: u32 = BK * BN / 8u / THREADS;

// The slabs, SW halves an element (a scalar, vec2 or vec4 of f16), and `put_a`/`put_b`: an octet into 8 halves from
// `at` (a multiple of 8), SW halves a store.
/*SLABS*/
// One 16 x 16 fragment per subgroup, on its way from an accumulator to the epilogue.
var<workgroup> frag: array<f32, 2048>;

// A thread's octets of A's slab at k0: all loads are issued before any is used, so their latencies overlap.
fn fetch_a(li: u32, m0: u32, k0: u32, base: u32, size: vec3<u32>) -> array<vec4<u32>, LA> {
    var r: array<vec4<u32>, LA>;
    for (var j = 0u; j < LA; j++) {
        let o = li + j * THREADS;
        let line = o / OA;
        let pos = (o % OA) * 8u;
        if (A_ALONG_K) {
            r[j] = octet_a(m0 + line, k0 + pos, base, size);
        } else {
            r[j] = octet_a(m0 + pos, k0 + line, base, size);
        }
    }
    return r;
}

fn fetch_b(li: u32, n0: u32, k0: u32, base: u32, size: vec3<u32>) -> array<vec4<u32>, LB> {
    var r: array<vec4<u32>, LB>;
    for (var j = 0u; j < LB; j++) {
        let o = li + j * THREADS;
        let line = o / OB;
        let pos = (o % OB) * 8u;
        if (B_ALONG_K) {
            r[j] = octet_b(k0 + pos, n0 + line, base, size);
        } else {
            r[j] = octet_b(k0 + line, n0 + pos, base, size);
        }
    }
    return r;
}

fn put(li: u32, ra: array<vec4<u32>, LA>, rb: array<vec4<u32>, LB>) {
    for (var j = 0u; j < LA; j++) {
        let o = li + j * THREADS;
        put_a((o / OA) * SA + (o % OA) * 8u, ra[j]);
    }
    for (var j = 0u; j < LB; j++) {
        let o = li + j * THREADS;
        put_b((o / OB) * SB + (o % OB) * 8u, rb[j]);
    }
}

// The outputs of the fragment subgroup `sg` just stored, from row r0 and column c0 of the output matrix; each lane
// takes every `width`-th element.
fn drain(sg: u32, lane: u32, width: u32, r0: u32, c0: u32, base: u32, size: vec3<u32>) {
    for (var e = lane; e < 256u; e += width) {
        let row = r0 + e / 16u;
        let col = c0 + e % 16u;
        if (row < size.x && col < size.y) {
            store(row, col, (base + row) * size.y + col, frag[sg * 256u + e]);
        }
    }
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>, @builtin(subgroup_id) sg: u32,
        @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) width: u32) {
    let size = sizes();
    let tiles_m = (size.x + BM - 1u) / BM;
    let tiles_n = (size.y + BN - 1u) / BN;
    let w = wid.x + wid.y * nwg.x;
    let batch = w / (tiles_m * tiles_n);
    // Uniform per workgroup, so the barriers and cooperative operations below stay in uniform control flow.
    if (batch >= batches()) { return; }
    set_batch(batch);
    let tile = w % (tiles_m * tiles_n);
    let m0 = (tile / tiles_n) * BM;
    let n0 = (tile % tiles_n) * BN;
    let base_a = batch * size.x;
    let base_b = batch * size.z;
    // The subgroup's first row and column within the block.
    let r0 = (sg / SGN) * FM * 16u;
    let c0 = (sg % SGN) * FN * 16u;

    /*ACCUMULATORS*/
    var ra = fetch_a(li, m0, 0u, base_a, size);
    var rb = fetch_b(li, n0, 0u, base_b, size);
    for (var k0 = 0u; k0 < size.z; k0 += BK) {
        put(li, ra, rb);
        workgroupBarrier();
        if (k0 + BK < size.z) {
            ra = fetch_a(li, m0, k0 + BK, base_a, size);
            rb = fetch_b(li, n0, k0 + BK, base_b, size);
        }
        for (var kk = 0u; kk < BK; kk += 16u) {
            /*MULTIPLY*/
        }
        workgroupBarrier();
    }

    /*EPILOGUE*/
}
