//! A node's gradient as the backward pass sums it from its readers, with narrowed pieces kept apart until it is
//! needed.
//!
//! Each `narrow` of a node hands back its gradient zero-padded to the node's shape. Summed as tensors, the pieces
//! of `qkv` split three ways became three padded concatenations and two additions, a kernel that read and added
//! zeros; kept apart, disjoint pieces of one axis join into one concatenation of the pieces themselves, which the
//! scheduler can also let their producers store into directly.

use super::rules::join;
use crate::tensor::Tensor;

/// A gradient being summed.
pub(super) enum PendingGrad {
    Whole(Tensor),
    /// Disjoint pieces along `axis` (of extent `extent`), each `(start, gradient)`, sorted by start; zeros between.
    Pieces {
        axis: usize,
        extent: usize,
        pieces: Vec<(usize, Tensor)>,
    },
}

impl PendingGrad {
    /// The gradient `part` of a narrow to `start..` along `axis` of an axis of extent `extent`.
    pub fn piece(axis: usize, start: usize, extent: usize, part: Tensor) -> PendingGrad {
        PendingGrad::Pieces { axis, extent, pieces: vec![(start, part)] }
    }

    /// Adds `other` in: pieces of the same axis that overlap no other piece (or cover exactly the same range) stay
    /// pieces; anything else makes a whole tensor.
    pub fn add(self, other: PendingGrad) -> PendingGrad {
        match (self, other) {
            (
                PendingGrad::Pieces { axis, extent, mut pieces },
                PendingGrad::Pieces { axis: a2, extent: e2, pieces: more },
            ) if axis == a2 && extent == e2 && fits(axis, &pieces, &more) => {
                let len = |t: &Tensor| t.shape.dims()[axis];
                for (start, t) in more {
                    if let Some(same) = pieces.iter_mut().find(|(s, p)| *s == start && len(p) == len(&t)) {
                        same.1 = &same.1 + &t;
                        continue;
                    }
                    let at = pieces.partition_point(|(s, _)| *s < start);
                    pieces.insert(at, (start, t));
                }
                PendingGrad::Pieces { axis, extent, pieces }
            }
            (a, b) => PendingGrad::Whole(a.finish() + &b.finish()),
        }
    }

    /// The gradient as one tensor.
    pub fn finish(self) -> Tensor {
        match self {
            PendingGrad::Whole(t) => t,
            PendingGrad::Pieces { axis, extent, pieces } => join(axis, extent, &pieces),
        }
    }
}

/// Whether each of `more` covers exactly the range of one of `pieces` or overlaps none of them.
fn fits(axis: usize, pieces: &[(usize, Tensor)], more: &[(usize, Tensor)]) -> bool {
    let len = |t: &Tensor| t.shape.dims()[axis];
    more.iter().all(|(start, t)| {
        let end = start + len(t);
        pieces.iter().all(|(s, p)| (*s == *start && len(p) == len(t)) || end <= *s || s + len(p) <= *start)
    })
}
