//! `index_add` with an index that is host data: the rows each output row receives are listed on the host, then
//! summed on the device by gathers, in work proportional to the index rather than to the output.
//!
//! An embedding's gradient (`index_add` of a batch's token rows into the table) is the case: its token ids come
//! from the host every step. The output rows that receive anything are grouped by how many rows they receive
//! into at most two blocks, each `[rows, most]` of source-row numbers padded with -1 (which gathers read as 0);
//! each block is one fold over its `most` axis, and one elementwise kernel adds every block's sums to the tensor at
//! their rows. Rows add in ascending index order, so every run gives the same bits.

use crate::dtype::DType;
use crate::graph::NodeOp;
use crate::tensor::Tensor;

/// The values of `t` (an `I32` or `U32` tensor) when they are host data not yet uploaded, read through views.
pub(crate) fn host_values(t: &Tensor) -> Option<Vec<i64>> {
    let state = t.device.state();
    let graph = &state.graph;
    let (view, source) = match &graph.node(t.id).op {
        NodeOp::Data(_) => (None, t.id),
        NodeOp::View(v, src) => (Some(v.clone()), *src),
        _ => return None,
    };
    let node = graph.node(source);
    let NodeOp::Data(words) = &node.op else { return None };
    let lanes = node.dtype.decode(words, node.shape.numel());
    let lanes = match view {
        Some(v) => crate::view::gather(&lanes, &v),
        None => lanes,
    };
    let signed = t.dtype == DType::I32;
    Some(lanes.into_iter().map(|w| if signed { w as i32 as i64 } else { w as i64 }).collect())
}

/// `base + index_add(axis, line, src)` for the host index `line`: as [`Tensor::index_add`], computed by blocks.
pub(crate) fn index_add(base: &Tensor, axis: usize, line: &[i64], src: &Tensor) -> Tensor {
    let n = base.shape.dims()[axis];
    // The source rows each output row receives, in ascending order; out-of-range entries land nowhere.
    let mut lists: Vec<Vec<i32>> = vec![Vec::new(); n];
    for (i, &r) in line.iter().enumerate() {
        if (0..n as i64).contains(&r) {
            lists[r as usize].push(i as i32);
        }
    }
    let mut rows: Vec<usize> = (0..n).filter(|&r| !lists[r].is_empty()).collect();
    if rows.is_empty() {
        return base.clone();
    }
    rows.sort_by_key(|&r| lists[r].len());
    // Two blocks: the rows receiving at most `split` rows, padded to `split`, and the rest, padded to the most any
    // receives. The split is the power of two that pads least (one block when that is best). Every size is
    // rounded up to a power of two, so batches of the same kind give the same shapes and a training step that
    // draws new ids each time reuses its plan instead of planning its whole graph again.
    let most = lists[*rows.last().expect("rows")].len().next_power_of_two();
    let padded = |split: usize| {
        let light = rows.partition_point(|&r| lists[r].len() <= split);
        light * split + (rows.len() - light) * most
    };
    let candidates = (0..usize::BITS).map(|b| 1usize << b).take_while(|&s| s < most).chain([most]);
    let split = candidates.min_by_key(|&s| padded(s)).unwrap_or(most);
    let light = rows.partition_point(|&r| lists[r].len() <= split);
    let blocks = [(&rows[..light], split), (&rows[light..], most)];
    // Moved so the axis leads and everything else is one axis: `[n, rest]` and `[m, rest]`.
    let order: Vec<usize> = [axis].into_iter().chain((0..base.ndim()).filter(|&d| d != axis)).collect();
    let rest = base.numel().checked_div(n).unwrap_or(0);
    let lead = |t: &Tensor, len: usize| t.permute(order.clone()).reshape([len, rest]);
    let src = lead(src, line.len());
    let mut sum = lead(base, n);
    for (members, width) in blocks {
        if members.is_empty() {
            continue;
        }
        let bucket = members.len().next_power_of_two();
        let mut table = vec![-1i32; bucket * width];
        let mut at = vec![-1i32; n];
        for (k, &r) in members.iter().enumerate() {
            table[k * width..][..lists[r].len()].copy_from_slice(&lists[r]);
            at[r] = k as i32;
        }
        let table = Tensor::from_vec_on(table, [bucket * width], &base.device);
        let picked = src.gathered(0, &spread(&table, rest), None);
        let block = picked.reshape([bucket, width, rest]).sum(1);
        let at = Tensor::from_vec_on(at, [n], &base.device);
        sum += block.gathered(0, &spread(&at, rest), None);
    }
    let mut inverse = vec![0; order.len()];
    for (d, &o) in order.iter().enumerate() {
        inverse[o] = d;
    }
    let mut moved = base.shape.dims().to_vec();
    moved.remove(axis);
    moved.insert(0, n);
    sum.reshape(moved).permute(inverse)
}

/// The 1-D `index` as a `[len, rest]` gather index of rows: each entry repeated along a row.
fn spread(index: &Tensor, rest: usize) -> Tensor {
    index.reshape([index.numel(), 1]).expand([index.numel(), rest])
}
