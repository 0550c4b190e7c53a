//! A batch's coordinates as runs (stretches of elements stepping by one along one axis) and the strided reads over
//! them. A strided read costs one dot product per run and an add per element (a copy where the step is 1) rather than a
//! dot product over per-element coordinate vectors, which made reading through a view many times slower per element
//! than a plain read (figures: docs/notes/source-measurements.md, `src/backend/cpu/runs.rs`).

use super::simd;

/// Elements `at..at + len` of a batch: element `j` of the run is at the coordinates of its first element plus `j`
/// along `axis`. Where the batch's own indices are per run ([`super::eval::Own::Runs`]), element `j`'s is
/// `own + j * own_step`; elsewhere those two are not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Run {
    pub at: usize,
    pub len: usize,
    pub axis: usize,
    pub own: usize,
    pub own_step: usize,
}

/// The runs of a batch, in batch order (each starts where the one before ends), with each run's first coordinates.
#[derive(Clone, Debug, Default)]
pub(super) struct Runs {
    rank: usize,
    list: Vec<Run>,
    /// `rank` coordinates per run.
    starts: Vec<i64>,
    /// Coordinates [`Runs::row_major`] walks with, kept so that a batch allocates nothing.
    cursor: Vec<i64>,
}

/// The innermost axis of `dims` with more than one element (0 if none): runs go along it, so trailing axes of
/// extent 1 (a column `[n, 1]`) do not cut every run to one element.
pub(super) fn inner_axis(dims: &[usize]) -> usize {
    dims.iter().rposition(|&d| d > 1).unwrap_or(0)
}

impl Runs {
    /// Empties the list for coordinates of `rank` axes, keeping the vectors' capacity.
    pub fn clear(&mut self, rank: usize) {
        self.rank = rank;
        self.list.clear();
        self.starts.clear();
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The runs, each with its first element's coordinates.
    pub fn iter(&self) -> impl Iterator<Item = (Run, &[i64])> + '_ {
        self.list.iter().zip(self.starts.chunks_exact(self.rank.max(1))).map(|(r, s)| (*r, &s[..self.rank]))
    }

    /// The only run, when there is exactly one.
    pub fn single(&self) -> Option<(Run, &[i64])> {
        (self.list.len() == 1).then(|| self.iter().next().expect("one run"))
    }

    /// Appends a run (not empty) starting at coordinates `start`.
    pub fn push(&mut self, run: Run, start: &[i64]) {
        debug_assert!(run.len > 0 && start.len() == self.rank);
        self.list.push(run);
        self.starts.extend_from_slice(start);
        if self.rank == 0 {
            // One slot per run all the same, so `iter`'s chunks line up with the list.
            self.starts.push(0);
        }
    }

    /// Appends one element at coordinates `c`, extending the last run when `c` is one step on along its axis (or,
    /// for a run of one element, along the one axis where `c` is one more and every other coordinate equal).
    pub fn push_point(&mut self, c: &[i64]) {
        let rank = self.rank;
        let at = self.list.last().map_or(0, |r| r.at + r.len);
        if let Some(last) = self.list.last_mut() {
            let start = &self.starts[self.starts.len() - rank.max(1)..][..rank];
            let len = last.len as i64;
            // Whether `c` is `len` steps on from the start along `axis`, every other coordinate the same.
            let continues = |axis: usize| (0..rank).all(|d| c[d] == start[d] + if d == axis { len } else { 0 });
            let axis = if last.len > 1 { Some(last.axis) } else { (0..rank).find(|&d| c[d] == start[d] + 1) };
            if let Some(axis) = axis.filter(|&a| continues(a)) {
                last.axis = axis;
                last.len += 1;
                return;
            }
        }
        self.push(Run { at, len: 1, axis: 0, own: 0, own_step: 0 }, c);
    }

    /// Elements `lo..hi` of `dims` in row-major order, as runs along [`inner_axis`]; own indices consecutive from
    /// `lo`.
    pub fn row_major(&mut self, dims: &[usize], lo: usize, hi: usize) {
        self.clear(dims.len());
        if lo >= hi {
            return;
        }
        let inner = inner_axis(dims);
        let mut c = std::mem::take(&mut self.cursor);
        c.clear();
        c.resize(dims.len(), 0);
        let mut rest = lo;
        for d in (0..dims.len()).rev() {
            (c[d], rest) = ((rest % dims[d]) as i64, rest / dims[d]);
        }
        let mut at = 0;
        while at < hi - lo {
            let room = if dims.is_empty() { 1 } else { dims[inner] - c[inner] as usize };
            let len = room.min(hi - lo - at);
            self.push(Run { at, len, axis: inner, own: lo + at, own_step: 1 }, &c);
            at += len;
            if dims.is_empty() {
                break;
            }
            // On to the next row: the inner coordinate wraps and carries into the axes before it (those after it
            // have extent 1 and stay 0).
            c[inner] += len as i64;
            let mut d = inner;
            while c[d] == dims[d] as i64 && d > 0 {
                c[d] = 0;
                d -= 1;
                c[d] += 1;
            }
        }
        self.cursor = c;
    }

    /// Adds `by` to coordinate `axis` of every run's start (into a part's frame).
    pub fn shift_axis(&mut self, axis: usize, by: i64) {
        self.starts.chunks_exact_mut(self.rank.max(1)).for_each(|s| s[axis] += by);
    }

    /// Sets coordinate `axis` of every run's start to `v` (a fold's step along an axis no run moves along).
    pub fn set_axis(&mut self, axis: usize, v: i64) {
        debug_assert!(self.list.iter().all(|r| r.len == 1 || r.axis != axis));
        self.starts.chunks_exact_mut(self.rank.max(1)).for_each(|s| s[axis] = v);
    }
}

/// The index a view (`strides`, `offset`) reaches at a run's first element, and its step per element of the run.
#[inline]
pub(super) fn view_at(strides: &[i64], offset: i64, run: Run, start: &[i64]) -> (i64, i64) {
    let base = offset + start.iter().zip(strides).map(|(c, s)| c * s).sum::<i64>();
    (base, if run.len > 1 { strides[run.axis] } else { 0 })
}

/// Fills `out` with `src[base + j * step]`: a copy where the step is 1, a fill where it is 0. Panics, as slice
/// indexing does, when an index falls outside `src`.
#[inline]
pub(super) fn read_strided<T: Copy>(src: &[T], base: i64, step: i64, out: &mut [T]) {
    let n = out.len() as i64;
    if n == 0 {
        return;
    }
    let last = base + (n - 1) * step;
    let (lo, hi) = (base.min(last), base.max(last));
    assert!(lo >= 0 && hi < src.len() as i64, "a strided read of {lo}..={hi} outside {} elements", src.len());
    let base = base as usize;
    match step {
        1 => out.copy_from_slice(&src[base..base + out.len()]),
        0 => out.fill(src[base]),
        _ => {
            let src = &src[lo as usize..=hi as usize];
            let mut at = base - lo as usize;
            for o in out.iter_mut() {
                // SAFETY: `at` runs over an arithmetic sequence whose first and last terms are inside `src` (checked
                // above), so every term is.
                *o = unsafe { *src.get_unchecked(at) };
                at = at.wrapping_add(step as usize);
            }
        }
    }
}

/// Fills `rows` x `cols` of `out`, row `r` at `r * pitch`, with `src[base + r * row_step + j * col_step]` at row
/// `r`, column `j`, down the columns: where `row_step` is 1 (a transposed view), each column is a stretch of
/// `src`, read whole, 8 columns at a time transposed in registers ([`simd::transpose8`]). Read row by row, every
/// element would be a line of its own, lines a power of two apart evicting each other from the L1 cache. Panics
/// when an index falls outside `src`.
pub(super) fn read_tile(
    src: &[f32],
    base: i64,
    [row_step, col_step]: [i64; 2],
    [rows, cols]: [usize; 2],
    pitch: usize,
    out: &mut [f32],
) {
    if rows == 0 || cols == 0 {
        return;
    }
    assert!(cols <= pitch && (rows - 1) * pitch + cols <= out.len(), "a tile past its output");
    // The indices are affine in (r, j): the extremes are at the corners.
    let corners = [0, (rows as i64 - 1) * row_step].map(|r| [0, (cols as i64 - 1) * col_step].map(|j| base + r + j));
    let (lo, hi) = (corners.as_flattened().iter().min().unwrap(), corners.as_flattened().iter().max().unwrap());
    assert!(*lo >= 0 && *hi < src.len() as i64, "a strided read of {lo}..={hi} outside {} elements", src.len());
    let at = |r: usize, j: usize| (base + r as i64 * row_step + j as i64 * col_step) as usize;
    // 8 x 8 blocks first, where rows are consecutive in `src`; then what is left, element by element.
    let (mut rows8, mut cols8) = (0, 0);
    if row_step == 1 && rows >= 8 && cols >= 8 {
        (rows8, cols8) = (rows / 8 * 8, cols / 8 * 8);
        'blocks: for j in (0..cols8).step_by(8) {
            for r in (0..rows8).step_by(8) {
                // SAFETY: the block's source elements are inside `src` (between the corners), its destination rows
                // `r..r + 8`, columns `j..j + 8`, inside `out`.
                let done = unsafe {
                    simd::transpose8(
                        src.as_ptr().add(at(r, j)),
                        col_step as isize,
                        out.as_mut_ptr().add(r * pitch + j),
                        pitch,
                    )
                };
                if !done {
                    (rows8, cols8) = (0, 0);
                    break 'blocks;
                }
            }
        }
    }
    for j in 0..cols {
        let from = if j < cols8 { rows8 } else { 0 };
        for r in from..rows {
            // SAFETY: as for the blocks.
            unsafe { *out.get_unchecked_mut(r * pitch + j) = *src.get_unchecked(at(r, j)) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs_of(r: &Runs) -> Vec<(usize, usize, usize, Vec<i64>)> {
        r.iter().map(|(run, s)| (run.at, run.len, run.axis, s.to_vec())).collect()
    }

    #[test]
    fn row_major_runs_wrap_rows_and_skip_unit_axes() {
        let mut r = Runs::default();
        r.row_major(&[3, 4], 2, 11);
        assert_eq!(runs_of(&r), [(0, 2, 1, vec![0, 2]), (2, 4, 1, vec![1, 0]), (6, 3, 1, vec![2, 0])]);
        r.row_major(&[5, 1], 1, 4);
        assert_eq!(runs_of(&r), [(0, 3, 0, vec![1, 0])]);
        r.row_major(&[2, 3, 2], 3, 12);
        let want = [(0, 1, 2, vec![0, 1, 1]), (1, 2, 2, vec![0, 2, 0]), (3, 2, 2, vec![1, 0, 0])];
        let more = [(5, 2, 2, vec![1, 1, 0]), (7, 2, 2, vec![1, 2, 0])];
        assert_eq!(runs_of(&r), want.into_iter().chain(more).collect::<Vec<_>>());
        r.row_major(&[], 0, 1);
        assert_eq!(r.iter().count(), 1);
    }

    #[test]
    fn points_merge_along_the_axis_they_step() {
        let mut r = Runs::default();
        r.clear(3);
        for c in [[0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0], [1, 1, 0], [2, 1, 0], [2, 1, 2]] {
            r.push_point(&c);
        }
        assert_eq!(runs_of(&r), [(0, 3, 2, vec![0, 0, 0]), (3, 3, 0, vec![0, 1, 0]), (6, 1, 0, vec![2, 1, 2])]);
    }

    #[test]
    fn strided_reads_match_indexing() {
        let src: Vec<u32> = (0..100).collect();
        for (base, step, n) in [(5i64, 1i64, 10usize), (7, 0, 4), (3, 7, 13), (99, -3, 20), (50, -1, 51)] {
            let mut out = vec![0; n];
            read_strided(&src, base, step, &mut out);
            let want: Vec<u32> = (0..n as i64).map(|j| src[(base + j * step) as usize]).collect();
            assert_eq!(out, want, "{base} {step} {n}");
        }
    }

    #[test]
    fn tile_reads_match_indexing() {
        let src: Vec<f32> = (0..1000).map(|i| i as f32).collect();
        for (base, row_step, col_step, rows, cols) in [
            (0i64, 1i64, 40i64, 16usize, 20usize),
            (5, 1, 33, 7, 3),
            (999, -1, -50, 9, 19),
            (10, 3, 0, 5, 4),
            (0, 1, 1, 1, 1),
            (3, 1, 60, 16, 16),
            (400, 1, -37, 17, 9),
        ] {
            let mut out = vec![0.0; rows * cols];
            read_tile(&src, base, [row_step, col_step], [rows, cols], cols, &mut out);
            let want: Vec<f32> = (0..rows as i64)
                .flat_map(|r| (0..cols as i64).map(move |j| (base + r * row_step + j * col_step) as f32))
                .collect();
            assert_eq!(out, want, "{base} {row_step} {col_step} {rows}x{cols}");
        }
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn a_strided_read_past_the_end_panics() {
        read_strided(&[1.0f32; 10], 2, 4, &mut [0.0; 3]);
    }
}
