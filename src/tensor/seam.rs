//! The few graph primitives the floors above the API need (autograd, optim, checkpoints), as crate-private `Tensor`
//! methods: the upper floors name tensors, never graph nodes.

use crate::device::Device;
use crate::dtype::DType;
use crate::graph::NodeOp;
use crate::shape::Shape;
use crate::tensor::Tensor;
use crate::view::View;

impl Tensor {
    /// A tensor of host words (lanes of `dtype`, row-major), uploaded by the first realize that reads them.
    pub(crate) fn from_words(device: &Device, words: Vec<u32>, shape: Shape, dtype: DType) -> Tensor {
        Tensor::from_op(device, NodeOp::Data(words), shape, dtype)
    }

    /// An untracked view of this node itself (not composed with the views it reads through): it keeps reading the
    /// value this node holds now after a later [`Tensor::assign_from`] moves the node's readers elsewhere.
    pub(crate) fn pinned_view(&self) -> Tensor {
        let view = NodeOp::View(View::contiguous(&self.shape), self.id);
        Tensor::from_op(&self.device, view, self.shape.clone(), self.dtype)
    }

    /// Whether this handle is the only one on host data or a buffer, so that a new owner may take the node over.
    pub(crate) fn is_sole_storage(&self) -> bool {
        let state = self.device.state();
        state.graph.refs(self.id) == 1 && matches!(state.graph.node(self.id).op, NodeOp::Data(_) | NodeOp::Buffer)
    }

    /// A copy of this value in a node of its own (untracked).
    pub(crate) fn copied(&self) -> Tensor {
        Tensor::from_op(&self.device, NodeOp::Contiguous(self.id), self.shape.clone(), self.dtype)
    }

    /// Makes this node hold `value`'s (realized) buffer, moving the nodes that read the old value onto a node that
    /// keeps it. Returns whether the buffer had to be copied (`value`'s buffer is shared), in which case this node
    /// is left to realize again.
    pub(crate) fn assign_from(&self, value: &Tensor) -> bool {
        let mut state = self.device.state();
        let mut freed = Vec::new();
        let copied = state.graph.assign(self.id, value.id, &mut freed);
        let crate::realize::EngineState { stats, .. } = &mut *state;
        self.device.free(stats, freed);
        copied
    }

    /// Lets go of this handle while its node may live on (read by a lazy update), keeping what hands one out again
    /// while it does.
    pub(crate) fn release(self) -> Released {
        Released { device: self.device.clone(), id: self.id, shape: self.shape.clone(), dtype: self.dtype }
    }
}

/// A tensor whose handle was let go ([`Tensor::release`]); [`Released::handle`] hands one out again while its node
/// lives.
pub(crate) struct Released {
    device: Device,
    id: crate::graph::NodeId,
    shape: Shape,
    dtype: DType,
}

impl Released {
    /// A handle on the node again; zeros if the node is gone (a state the rule did not read).
    pub(crate) fn handle(self) -> Tensor {
        let mut state = self.device.state();
        if !state.graph.contains(self.id) {
            drop(state);
            return Tensor::zeros_on(self.shape, &self.device);
        }
        state.graph.retain(self.id);
        drop(state);
        Tensor { id: self.id, shape: self.shape, dtype: self.dtype, device: self.device, tape: None }
    }
}
