// Thin products: at most NT outputs along one side, where a tile would stay mostly empty. Each thread keeps a sum
// per output of that narrow side in registers, so the wide operand is read once; a fold per output (the other way
// to compute them) reads it once per output. The kernel is written for the wide side x (A's rows with few
// columns, B's columns with few rows) and the narrow side j; `wide`, `narrow` and `put` map them onto A, B and C.
//
// TEAM (the wide operand is contiguous along k): a team of TEAM_SIZE threads per wide output walks k, 8 steps of
// the team apart at a time so each thread has 8 loads in flight, then the team's sums are added in workgroup
// memory. Otherwise: a thread per wide output walks all of k, neighbours reading neighbours. Both read the narrow
// operand from a slab the workgroup stages in workgroup memory, KC steps of k at a time.
//
// Codegen (src/codegen/matmul.rs) prepends FEW_COLUMNS, TEAM, NT (the narrow side's extent, a constant so that
// every loop over it unrolls and `acc` stays in registers) and LINES (wide outputs per workgroup: THREADS /
// TEAM_SIZE or THREADS), the bindings and the functions the tiled kernel
// also calls (kernels/matmul.wgsl): sizes, batches, set_batch, load_a, load_b and store.

const THREADS: u32 = 256u;
const TEAM_SIZE: u32 = 32u;
// Steps of k whose narrow operand the workgroup stages at once: computed once per workgroup instead of once per
// thread (walk) or per team (team). Each load computes its element's index through the operand's view, and that
// integer work, not memory, held the first version at 2-3 TFLOP/s on the H200.
const KC: u32 = 256u;

// m, n and k, and the batch matrix's first row of A (and of C) and of B.
var<private> size: vec3<u32>;
var<private> base_a: u32;
var<private> base_b: u32;

// The narrow operand's slab, `slab[j * KC + kk]`, then (TEAM) each thread's NT sums for its team to add: that
// reuse needs KC == THREADS.
var<workgroup> slab: array<f32, KC * NT>;

// The wide side's extent.
fn wide_size() -> u32 { return select(size.y, size.x, FEW_COLUMNS); }

fn wide(x: u32, k: u32) -> f32 {
    if (FEW_COLUMNS) { return load_a(x, k, (base_a + x) * size.z + k); }
    return load_b(k, x, (base_b + k) * size.y + x);
}
fn narrow(k: u32, j: u32) -> f32 {
    if (FEW_COLUMNS) { return load_b(k, j, (base_b + k) * size.y + j); }
    return load_a(j, k, (base_a + j) * size.z + k);
}
fn put(x: u32, j: u32, v: f32) {
    if (FEW_COLUMNS) {
        store(x, j, (base_a + x) * size.y + j, v);
    } else {
        store(j, x, (base_a + j) * size.y + x, v);
    }
}

// Stages steps k0 .. k0 + KC of the narrow operand, 0 past k: thread t loads step k0 + t, neighbours reading
// neighbours where the operand is contiguous along k.
fn stage(lid: u32, k0: u32) {
    workgroupBarrier();
    let k = k0 + lid;
    for (var j = 0u; j < NT; j++) {
        var v = 0.0;
        if (k < size.z) { v = narrow(k, j); }
        slab[j * KC + lid] = v;
    }
    workgroupBarrier();
}

fn team(lid: u32, first: u32) {
    let x = first + lid / TEAM_SIZE;
    let lane = lid % TEAM_SIZE;
    let inside = x < wide_size();
    var acc: array<f32, NT>;
    // The bound from `sizes()`: a private variable's value does not count as uniform, and `stage` has barriers.
    for (var k0 = 0u; k0 < sizes().z; k0 += KC) {
        stage(lid, k0);
        if (inside) {
            // KC / TEAM_SIZE = 8 steps per lane, all 8 loads in flight at once; 0 past k.
            var w: array<f32, KC / TEAM_SIZE>;
            for (var q = 0u; q < KC / TEAM_SIZE; q++) {
                let k = k0 + lane + q * TEAM_SIZE;
                w[q] = select(0.0, wide(x, min(k, size.z - 1u)), k < size.z);
            }
            for (var j = 0u; j < NT; j++) {
                var s = acc[j];
                for (var q = 0u; q < KC / TEAM_SIZE; q++) {
                    s = fma(w[q], slab[j * KC + lane + q * TEAM_SIZE], s);
                }
                acc[j] = s;
            }
        }
    }
    workgroupBarrier();
    for (var j = 0u; j < NT; j++) {
        slab[j * THREADS + lid] = acc[j];
    }
    workgroupBarrier();
    // Thread (line, j) adds its team's sums of output j, starting at a lane that differs with j so that the
    // outputs' reads fall in different banks.
    if (lid < LINES * NT) {
        let line = lid / NT;
        let j = lid % NT;
        var s = 0.0;
        for (var t = 0u; t < TEAM_SIZE; t++) {
            s += slab[j * THREADS + line * TEAM_SIZE + (t + j) % TEAM_SIZE];
        }
        if (first + line < wide_size()) {
            put(first + line, j, s);
        }
    }
}

fn walk(lid: u32, first: u32) {
    let x = first + lid;
    let inside = x < wide_size();
    var acc: array<f32, NT>;
    // The bound from `sizes()`: a private variable's value does not count as uniform, and `stage` has barriers.
    for (var k0 = 0u; k0 < sizes().z; k0 += KC) {
        stage(lid, k0);
        if (inside) {
            let steps = min(KC, size.z - k0);
            var kk = 0u;
            for (; kk + 3u < steps; kk += 4u) {
                let w0 = wide(x, k0 + kk);
                let w1 = wide(x, k0 + kk + 1u);
                let w2 = wide(x, k0 + kk + 2u);
                let w3 = wide(x, k0 + kk + 3u);
                for (var j = 0u; j < NT; j++) {
                    var s = acc[j];
                    s = fma(w0, slab[j * KC + kk], s);
                    s = fma(w1, slab[j * KC + kk + 1u], s);
                    s = fma(w2, slab[j * KC + kk + 2u], s);
                    s = fma(w3, slab[j * KC + kk + 3u], s);
                    acc[j] = s;
                }
            }
            for (; kk < steps; kk++) {
                let w = wide(x, k0 + kk);
                for (var j = 0u; j < NT; j++) {
                    acc[j] = fma(w, slab[j * KC + kk], acc[j]);
                }
            }
        }
    }
    if (!inside) { return; }
    // The stores, written out by codegen with constant indices into `acc` (as in matmul.wgsl).
/*STORES*/
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    size = sizes();
    let w = wid.x + wid.y * nwg.x;
    // From `sizes()`, not `size`: a private variable's value does not count as uniform.
    let s = sizes();
    let tiles = (select(s.y, s.x, FEW_COLUMNS) + LINES - 1u) / LINES;
    let batch = w / tiles;
    // Uniform per workgroup, so the team's barrier stays in uniform control flow.
    if (batch >= batches()) { return; }
    set_batch(batch);
    base_a = batch * size.x;
    base_b = batch * size.z;
    let first = (w % tiles) * LINES;
    if (TEAM) {
        team(lid.x, first);
    } else {
        walk(lid.x, first);
    }
}
