// The tiled matrix product: a workgroup of 256 threads computes a BM x BN block of one batch matrix, each thread a
// TM x TN sub-block held in registers. Every BK steps of k, the workgroup stages a BM x BK slab of A and a BK x BN
// slab of B in workgroup memory (read along whichever axis is contiguous in memory, so neighbouring threads read
// neighbouring addresses), then each thread reads 4-wide vectors of both slabs and does TM x TN fused
// multiply-adds per step of k. Edges are handled by loading zeros past m, n and k and storing only inside.
//
// Codegen (src/codegen/matmul.rs) prepends the constants BM BN BK TM TN A_ALONG_K B_ALONG_K, the bindings, and:
//   fn sizes() -> vec3<u32>            m, n and k
//   fn batches() -> u32                number of batch matrices
//   fn set_batch(b: u32)               sets the batch coordinates the operand and epilogue functions read
//   fn load_a(row: u32, k: u32, i: u32) -> f32   A's element (its prologue applied); i is the row-major index
//   fn load_b(k: u32, col: u32, i: u32) -> f32   B's element
//   fn store(row: u32, col: u32, i: u32, folded: f32)   the epilogue and the stores of one output element

const THREADS: u32 = 256u;
// Vec4 pitch of one step of k in the slabs: one vector of padding, so the transposing stores hit 32 banks.
const SA: u32 = BM / 4u + 1u;
const SB: u32 = BN / 4u + 1u;
// Threads along n, and the 4-row (4-column) strips of a thread's sub-block, spread BM / RM rows apart.
const TX: u32 = BN / TN;
const RM: u32 = TM / 4u;
const RN: u32 = TN / 4u;

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
    for (var k0 = 0u; k0 < size.z; k0 += BK) {
        for (var e = lid.x; e < BM * BK; e += THREADS) {
            var row = e % BM;
            var kk = e / BM;
            if (A_ALONG_K) {
                row = e / BK;
                kk = e % BK;
            }
            let gr = m0 + row;
            let gk = k0 + kk;
            var v = 0.0;
            if (gr < size.x && gk < size.z) {
                v = load_a(gr, gk, (base_a + gr) * size.z + gk);
            }
            slab_a[kk * SA + row / 4u][row % 4u] = v;
        }
        for (var e = lid.x; e < BK * BN; e += THREADS) {
            var col = e % BN;
            var kk = e / BN;
            if (B_ALONG_K) {
                col = e / BK;
                kk = e % BK;
            }
            let gc = n0 + col;
            let gk = k0 + kk;
            var v = 0.0;
            if (gc < size.y && gk < size.z) {
                v = load_b(gk, gc, (base_b + gk) * size.y + gc);
            }
            slab_b[kk * SB + col / 4u][col % 4u] = v;
        }
        workgroupBarrier();
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
    // (see `stores` in src/codegen/matmul.rs): a loop here, left rolled by a compiler facing a long epilogue, indexes
    // `acc` at run time and moves it out of registers.
/*STORES*/
}
