//! Maps on the CPU (elementwise kernels, epilogues, a matmul's evaluated operands): the order batches cover the
//! elements in, row-major or, where a load reads down the columns of its input (a transpose), in tiles whose
//! transposed loads are staged first, and the stores of their values.

use super::batch::{ravel, tasks_with, unravel, Batch, Ctx, Out, Own, Regs, BATCH};
use super::eval::{eval, store};
use super::runs::{inner_axis, read_tile, view_at, Run};
use super::simd;
use crate::dtype::DType;
use crate::kernel::{Instr, Kernel};
use std::ops::Range;

/// Outputs of at least this many bytes are written with non-temporal stores ([`simd::stream`]): they would not
/// stay in the cache anyway.
const STREAM_BYTES: usize = 8 << 20;
/// Elements one parallel task covers.
const TASK: usize = 32 * BATCH;
/// A load whose step along the inner axis is at least this many elements reads a cache line per element there.
const FAR: i64 = 16;
/// Rows of a tile (with one staged load): staging reads 4 cache lines in a row from each row of a transposed input,
/// whose rows are pages apart; fewer rows walk more pages per element (`a.t() + &b` at 4096x4096 ran faster with 64
/// rows than with 16, and no faster with 128; figures: docs/notes/source-measurements.md, `src/backend/cpu/map.rs`).
const TILE_ROWS: usize = 64;
/// Columns of a tile, at most: whole rows of the output up to this, so that batches read contiguous inputs and store in
/// order (`a.t() + &b` at 4096x4096 ran faster with 4096 columns than with 2048).
const TILE_COLS: usize = 4096;

/// Runs an elementwise kernel.
pub(super) fn elementwise(k: &Kernel, inputs: &[&[f32]], outputs: &mut [&mut [f32]]) {
    let values: Vec<usize> = k.outputs.iter().map(|&(_, v)| v).collect();
    map(k, 0..k.body.len(), inputs, &values, &k.out_types, outputs, None);
}

/// Runs instructions `range` of `k` at every element of its shape, storing the values of instructions `values` as
/// `types` to `outputs` at the element's row-major index; `reduced`, if given, is [`Instr::Reduced`] at each
/// element.
pub(super) fn map(
    k: &Kernel,
    range: Range<usize>,
    inputs: &[&[f32]],
    values: &[usize],
    types: &[DType],
    outputs: &mut [&mut [f32]],
    reduced: Option<&[f32]>,
) {
    let mut ctx = Ctx::new(k, inputs);
    let tiling = Tiling::new(&mut ctx, range.clone());
    let ctx = ctx;
    let numel = k.shape.numel();
    let outs: Vec<Out> = outputs.iter_mut().map(|o| Out(o.as_mut_ptr())).collect();
    let stream = numel * 4 >= STREAM_BYTES;
    // Stores elements `at` of the batch's values, `len` of them, at the outputs' element `to` on.
    let store_at = |regs: &Regs, n: usize, at: usize, len: usize, to: usize| {
        for ((o, &v), &dt) in outs.iter().zip(values).zip(types) {
            let lanes = &regs.get(&ctx, v, n)[at..at + len];
            // SAFETY: every element of the `numel` of each output is stored by exactly one batch of one task.
            unsafe {
                if stream && dt.size_in_bytes() == 4 {
                    simd::stream(o.at(to), lanes)
                } else {
                    store(*o, dt, to, lanes)
                }
            };
        }
    };
    let Some(tiles) = tiling else {
        tasks_with(
            numel.div_ceil(TASK),
            || (Regs::new(&ctx), Batch::empty()),
            |(regs, batch), t| {
                let end = numel.min((t + 1) * TASK);
                for lo in (t * TASK..end).step_by(BATCH) {
                    let hi = end.min(lo + BATCH);
                    batch.fill(k, lo, hi);
                    if let Some(r) = reduced {
                        batch.folded.clear();
                        batch.folded.extend_from_slice(&r[lo..hi]);
                    }
                    eval(&ctx, range.clone(), batch, regs);
                    store_at(regs, hi - lo, 0, hi - lo, lo);
                }
                if stream {
                    simd::stream_fence();
                }
            },
        );
        return;
    };
    let per = (TASK / (tiles.rows * tiles.cols)).max(1);
    tasks_with(
        tiles.count.div_ceil(per),
        || (Regs::new(&ctx), Batch::empty()),
        |(regs, batch), t| {
            for tile in t * per..tiles.count.min((t + 1) * per) {
                let (first, rows) = tiles.stage(&ctx, tile, regs);
                let cols = tiles.cols.min(tiles.dims[tiles.inner] - first[tiles.inner] as usize);
                for r in (0..rows).step_by(tiles.per_batch) {
                    // Several whole rows, or a row in pieces of at most a batch.
                    let rs = r..rows.min(r + tiles.per_batch);
                    let piece = if rs.len() > 1 { cols } else { BATCH };
                    for j in (0..cols).step_by(piece) {
                        let js = j..cols.min(j + piece);
                        tiles.batch(&first, rs.clone(), js, cols, batch, reduced);
                        eval(&ctx, range.clone(), batch, regs);
                        match batch.own {
                            Own::From(lo) => store_at(regs, batch.len, 0, batch.len, lo),
                            _ => batch
                                .runs
                                .iter()
                                .for_each(|(run, _)| store_at(regs, batch.len, run.at, run.len, run.own)),
                        }
                    }
                }
            }
            if stream {
                simd::stream_fence();
            }
        },
    );
}

/// A map's elements in tiles of `rows` x `cols` over two axes: `across`, along which a transposed load reads its
/// input in order, and the inner axis, along which it steps a cache line or more per element. Row-major batches
/// would bring in a line per element for such a load and use one value of it (lines a power of two apart, which
/// evict each other from the L1 cache). Instead each tile first stages those loads, reading each line whole and
/// transposing 8 x 8 blocks in registers ([`read_tile`]), then runs row-major batches over its rows, where the
/// staged values are windows like any contiguous input. Tiles go down `across` first, so consecutive tiles read
/// the next line of the same input rows.
struct Tiling {
    dims: Vec<usize>,
    across: usize,
    inner: usize,
    rows: usize,
    cols: usize,
    /// Tiles along `across` and along the inner axis.
    tiles: [usize; 2],
    /// The extents of the other axes (`across` and the inner axis at 1): one plane of tiles per coordinate.
    outer: Vec<usize>,
    count: usize,
    /// Tile rows per batch, and whether they are consecutive in the output (whole rows of it).
    per_batch: usize,
    /// Elements from one row of staged values to the next: a line more than a row where a batch is one row, so
    /// that rows 4 KiB apart (1024 f32) do not share the L1 cache's sets with each other and the input's lines.
    pitch: usize,
    consecutive: bool,
    /// The staged loads, in the order of their slots in [`Regs::staged`].
    staged: Vec<usize>,
}

impl Tiling {
    /// The tiling for the loads in `range` that step far along the inner axis, when one of them reads in order
    /// along another; marks them staged in `ctx`.
    fn new(ctx: &mut Ctx, range: Range<usize>) -> Option<Tiling> {
        let k = ctx.k;
        let dims = k.shape.dims();
        let inner = inner_axis(dims);
        if dims.len() < 2 || dims[inner] < 2 {
            return None;
        }
        // Loads inside a concatenation's part run on its sub-batches, which have no staged values.
        let mut in_part = vec![false; k.body.len()];
        for instr in &k.body {
            if let Instr::Cat { parts, .. } = instr {
                parts.iter().for_each(|p| in_part[p.body.clone()].iter_mut().for_each(|x| *x = true));
            }
        }
        let far = |i: usize| -> Option<&[i64]> {
            let Instr::Load { input, view: Some(v), .. } = k.body[i] else { return None };
            let (strides, _) = ctx.views[i].as_ref().expect("a strided load's view");
            let word = k.in_types[input].size_in_bytes() == 4;
            (word && v.frame == 0 && !in_part[i] && strides[inner].abs() >= FAR).then_some(strides.as_slice())
        };
        let staged: Vec<usize> = range.filter(|&i| far(i).is_some()).collect();
        let across = staged.iter().find_map(|&i| {
            let strides = far(i).expect("a far load");
            // The axis it reads in order along: the one with the smallest step.
            let d = (0..inner).filter(|&d| dims[d] > 1 && strides[d] != 0).min_by_key(|&d| strides[d].abs())?;
            (strides[d].abs() < FAR).then_some(d)
        })?;
        for (s, &i) in staged.iter().enumerate() {
            ctx.staged[i] = Some(s);
        }
        let cols = dims[inner].min(TILE_COLS);
        // The staged values of a tile stay about the size of the L2 cache.
        let rows = (TILE_ROWS / staged.len()).max(TILE_ROWS / 4).min(dims[across]);
        let tiles = [dims[across].div_ceil(rows), dims[inner].div_ceil(cols)];
        let mut outer = dims.to_vec();
        (outer[across], outer[inner]) = (1, 1);
        let count = outer.iter().product::<usize>() * tiles[0] * tiles[1];
        let consecutive = cols == dims[inner] && dims[across + 1..inner].iter().all(|&d| d == 1);
        let per_batch = (BATCH / cols).max(1);
        let pitch = if per_batch == 1 { cols + 16 } else { cols };
        Some(Tiling {
            dims: dims.to_vec(),
            across,
            inner,
            rows,
            cols,
            tiles,
            outer,
            count,
            per_batch,
            consecutive,
            pitch,
            staged,
        })
    }

    /// Stages the loads of tile `t` into `regs`; returns the coordinates of its first element and its rows.
    fn stage(&self, ctx: &Ctx, t: usize, regs: &mut Regs) -> (Vec<i64>, usize) {
        let [nr, nc] = self.tiles;
        let (tr, tc, o) = (t % nr, (t / nr) % nc, t / (nr * nc));
        let mut c = unravel(o, &self.outer);
        c[self.across] = (tr * self.rows) as i64;
        c[self.inner] = (tc * self.cols) as i64;
        let rows = self.rows.min(self.dims[self.across] - tr * self.rows);
        let cols = self.cols.min(self.dims[self.inner] - tc * self.cols);
        for (s, &i) in self.staged.iter().enumerate() {
            let Instr::Load { input, .. } = ctx.k.body[i] else { unreachable!("staged loads") };
            let (strides, offset) = ctx.views[i].as_ref().expect("a strided load's view");
            let run = Run { at: 0, len: cols, axis: self.inner, own: 0, own_step: 0 };
            let (base, step) = view_at(strides, *offset, run, &c);
            let out = &mut regs.staged[s];
            out.resize(rows * self.pitch, 0.0);
            read_tile(ctx.inputs[input], base, [strides[self.across], step], [rows, cols], self.pitch, out);
        }
        (c, rows)
    }

    /// Makes `batch` columns `js` of rows `rs` of the tile whose first element is at `first` and whose rows
    /// have `cols` elements (whole rows where there are several): a run per row; `reduced` gathered to match.
    fn batch(
        &self,
        first: &[i64],
        rs: Range<usize>,
        js: Range<usize>,
        cols: usize,
        batch: &mut Batch,
        reduced: Option<&[f32]>,
    ) {
        let len = js.len();
        batch.len = rs.len() * len;
        batch.staged_at = rs.start * self.pitch + js.start;
        batch.runs.clear(self.dims.len());
        batch.folded.clear();
        let mut c: smallvec::SmallVec<[i64; 8]> = first.into();
        c[self.across] += rs.start as i64;
        c[self.inner] += js.start as i64;
        let lo = ravel(&c, &self.dims);
        // The inner axis is the last one past extent 1: a row of the tile is consecutive in the output.
        batch.own = if self.consecutive || rs.len() == 1 { Own::From(lo) } else { Own::Runs };
        // The next batch: the row's next columns, or the first of the next rows.
        let row: usize = self.dims[self.across + 1..].iter().product();
        batch.ahead = if js.end < cols { len } else { rs.len() * row - js.start };
        for r in 0..rs.len() {
            let own = ravel(&c, &self.dims);
            batch.runs.push(Run { at: r * len, len, axis: self.inner, own, own_step: 1 }, &c);
            if let Some(red) = reduced {
                batch.folded.extend_from_slice(&red[own..own + len]);
            }
            c[self.across] += 1;
        }
    }
}
