//! Split-k: how many slices of k a single product is cut into where its output alone makes too few workgroups to
//! fill the GPU. The product API asks before it builds the graph (each slice is a product node, summed after);
//! the rule lives here beside the tile table it prices with.

use super::THIN;
use crate::kernel::{MatmulTiles, Thin};

/// How many slices of k a single `m x n x k` product is cut into on a GPU with `tiles`, if any (`contiguous(is_a,
/// last)`: whether operand a or b is contiguous along its last axis or the one before): where its output makes too few
/// workgroups to fill the GPU and k is long, enough slices (a power of two dividing k) for the slices' workgroups
/// to fill it.
/// - Tiled products (k at least 4096): slices at least 256 deep, sized for the large tile. Unsliced, a weight gradient
///   `[384, 16384] x [16384, 384]` makes only 36 workgroups and ran far below the product rate; slices sized for the
///   large tile ran nanoGPT's weight gradients faster than slices sized for the small one (figures:
///   docs/notes/source-measurements.md, `src/schedule/split_k.rs`). The count is the one [`tiled_slices`] prices
///   lowest.
/// - Thin products (at most [`THIN`] rows or columns; a 10-class layer's weight gradient, a
///   vector times a matrix) on the thin kernel's layout ([`Thin`], chosen by the same rule as the
///   scheduler's): slices at least 64 deep where a thread walks k, 256 where a team does.
///
pub(crate) fn split_k(
    tiles: &MatmulTiles,
    (m, k, n): (usize, usize, usize),
    contiguous: impl Fn(bool, bool) -> bool,
) -> Option<usize> {
    let thin = m.min(n) <= THIN;
    let (groups, depth) = if thin {
        // The scheduler's choice (a fold where there is none, which cuts k itself).
        let layout = Thin::choose(m, n, contiguous)?;
        (layout.groups(m, n, 1), if layout.team { 256 } else { 64 })
    } else {
        (tiles.large.groups(m, n), TILED_DEPTH)
    };
    slices(thin, groups, depth, k, m * n, tiles.min_large_groups)
}

/// [`split_k`]'s count for a product of `outputs` outputs over `k` making `groups` workgroups (thin, or large tiles),
/// cut into slices at least `depth` deep, on a device that runs `busy` workgroups at once.
fn slices(thin: bool, groups: usize, depth: usize, k: usize, outputs: usize, busy: usize) -> Option<usize> {
    // A k of at least 8 slices: for tiled products 8 of 512 (4096), though a slice may then be as shallow as
    // `TILED_DEPTH`.
    if k < 8 * if thin { depth } else { 512 } {
        return None;
    }
    let parts = if groups >= busy {
        1
    } else if thin {
        // The fewest slices that fill the device.
        let counts = slice_counts(k, depth);
        counts.clone().find(|&p| groups * p >= busy).or_else(|| counts.last()).unwrap_or(1)
    } else {
        tiled_slices(groups, k, outputs, busy)
    };
    // Slices too few for the scheduler's thin kernel (it wants half `min_large_groups`) would become a batched fold
    // plus a sum, slower than the one fold they replace.
    let thin_enough = !thin || groups * parts * 2 >= busy;
    (parts > 1 && thin_enough).then_some(parts)
}

/// The shallowest slice of k a tiled product is cut into ([`split_k`]).
const TILED_DEPTH: usize = 256;

/// What a slice's partial output costs to sum, against one step of k of a round of large tiles: the sum reads each
/// partial once, and this is its measured time per element over the measured time of a round's step of k (figures:
/// docs/notes/source-measurements.md, `src/schedule/split_k.rs`).
const SUM_PER_ELEMENT: f64 = 5.0e-6;

/// Slices of k for a tiled product of `groups` large tiles over `k`, with `outputs` outputs, on a device that runs
/// `busy` workgroups at once: 1 where the tiles alone fill the device. Otherwise the power of two dividing `k` into
/// slices at least [`TILED_DEPTH`] deep whose price is lowest (ties to fewer slices): its rounds of `busy` workgroups,
/// each as long as a slice, plus what summing its partials costs ([`SUM_PER_ELEMENT`]). A last round that is not full
/// costs part of a full one: its workgroups run faster with fewer beside them, and in a long product they start
/// staggered, so the part left empty is charged once over all the rounds. Fitted to nanoGPT's weight gradients, where
/// it priced each product close to its measured time at each count of slices tried; where two counts ran alike, the
/// smaller sum decides (figures: docs/notes/source-measurements.md, `src/schedule/split_k.rs`).
fn tiled_slices(groups: usize, k: usize, outputs: usize, busy: usize) -> usize {
    if groups >= busy {
        return 1;
    }
    let price = |p: usize| {
        let rounds = (groups * p) as f64 / busy as f64;
        let whole = rounds.ceil();
        (rounds + (whole - rounds) / whole) * (k / p) as f64 + SUM_PER_ELEMENT * (p * outputs) as f64
    };
    let counts = slice_counts(k, TILED_DEPTH);
    counts.min_by(|&p, &q| price(p).total_cmp(&price(q)).then(p.cmp(&q))).unwrap_or(1)
}

/// The slice counts k can be cut into: powers of two from 2 that divide `k` into slices at least `depth` deep.
fn slice_counts(k: usize, depth: usize) -> impl Iterator<Item = usize> + Clone {
    std::iter::successors(Some(2), |p| Some(p * 2)).take_while(move |&p| k % p == 0 && k / p >= depth)
}

#[cfg(test)]
mod tests {
    use super::{slices, tiled_slices};

    #[test]
    fn thin_products_are_cut_from_shorter_k_than_tiled_ones() {
        // A thin kernel walking k a thread at a time (slices 64 deep) is cut from k = 512, a team's (256 deep)
        // from 2048; tiled products only from 4096, though their slices may be 256 deep.
        assert_eq!(slices(true, 16, 64, 1024, 1024 * 10, 256), Some(16));
        assert_eq!(slices(true, 16, 64, 256, 1024 * 10, 256), None);
        assert_eq!(slices(true, 16, 256, 2048, 512 * 10, 256), Some(8));
        assert_eq!(slices(false, 9, 256, 2048, 384 * 384, 256), None);
        assert_eq!(slices(false, 9, 256, 4096, 384 * 384, 256), Some(16));
        // Enough workgroups already: no cut.
        assert_eq!(slices(false, 512, 256, 1 << 16, 4096 * 4096, 256), None);
    }

    #[test]
    fn weight_gradients_are_cut_where_rounds_and_sums_cost_least() {
        // nanoGPT's MLP weight gradients `[1536, 384]`: 36 large tiles over k = 16384 on a device running 256 at
        // once. 32 slices (4.5 rounds of 512) and 64 (9 rounds of 256) take as long; 32 sum half as much.
        assert_eq!(tiled_slices(36, 16384, 1536 * 384, 256), 32);
        // Its attention weights' `[1152, 384]`: 27 tiles, where 16 slices are 1.7 rounds of 1024 and 64 are 6.75
        // rounds of 256 (32 price within 0.01% of 64).
        assert_eq!(tiled_slices(27, 16384, 1152 * 384, 256), 64);
        // Its projection's `[384, 384]`: 9 tiles, 32 slices are 1.1 rounds, 64 are 2.25.
        assert_eq!(tiled_slices(9, 16384, 384 * 384, 256), 64);
        // The MLP's [1024 x 1024] gradient: 64 tiles, 4 slices fill one round exactly.
        assert_eq!(tiled_slices(64, 4096, 1024 * 1024, 256), 4);
        // Slices stay at least 256 deep, even where that leaves the device short of workgroups.
        assert_eq!(tiled_slices(9, 4096, 384 * 384, 256), 16);
        // Enough tiles already, or k too short to cut: no slices.
        assert_eq!(tiled_slices(256, 1 << 20, 1 << 20, 256), 1);
        assert_eq!(tiled_slices(10, 400, 1000, 256), 1);
        // k cut only by powers of two that divide it.
        assert_eq!(tiled_slices(36, 2 * 4097, 1536 * 384, 256), 2);
    }
}
