//! The kernel IR: what one fused dispatch computes, as the scheduler hands it to codegen and the runtime.

use crate::graph::NodeId;
use crate::op::{BinaryOp, UnaryOp};
use crate::shape::Shape;
use smallvec::SmallVec;

/// One instruction of a kernel body, in SSA form: operands are indices of earlier instructions.
#[derive(Clone, Debug, PartialEq)]
pub enum Instr {
    /// Read input `input` at the kernel's own index (`view: None`) or through the strided view `view`.
    Load {
        input: usize,
        view: Option<usize>,
    },
    /// The kernel parameter `Kernel::scalars[i]`.
    Scalar(usize),
    Unary(UnaryOp, usize),
    Binary(BinaryOp, usize, usize),
}

/// A fused elementwise kernel: one thread per element of `shape`, any number of outputs of that shape.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// The iteration space, which every output has.
    pub shape: Shape,
    /// Buffers read, in binding order.
    pub inputs: Vec<NodeId>,
    /// Nodes written, each with the instruction holding its value.
    pub outputs: Vec<(NodeId, usize)>,
    pub body: Vec<Instr>,
    /// Strides (in elements, one per axis of `shape`) of each strided view a `Load` uses. Values, not structure:
    /// they travel in the parameter buffer, so a new size reuses the pipeline.
    pub views: Vec<SmallVec<[usize; 4]>>,
    /// Scalar constants, also passed as parameters so that changing `5.0` to `6.0` compiles nothing.
    pub scalars: Vec<f32>,
    /// Graph nodes this kernel computes (fused ops), for debugging output.
    pub fused_ops: usize,
}

/// Where each group of parameters starts in the kernel's `array<u32>` parameter buffer.
///
/// Layout: `[numel, dims.., view0 strides.., view1 strides.., scalars (f32 bits)..]`; dims and strides are present
/// only when some load is strided. Codegen and the runtime both read offsets from here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParamLayout {
    pub rank: usize,
    pub dims: usize,
    pub views: usize,
    pub scalars: usize,
    pub len: usize,
}

impl Kernel {
    /// The offsets of each parameter group.
    pub fn layout(&self) -> ParamLayout {
        let rank = if self.views.is_empty() { 0 } else { self.shape.ndim() };
        let dims = 1;
        let views = dims + rank;
        let scalars = views + rank * self.views.len();
        ParamLayout { rank, dims, views, scalars, len: scalars + self.scalars.len() }
    }

    /// The parameter values, laid out as [`Kernel::layout`] says.
    pub fn params(&self) -> Vec<u32> {
        let layout = self.layout();
        let mut p = Vec::with_capacity(layout.len);
        p.push(self.shape.numel() as u32);
        if layout.rank > 0 {
            p.extend(self.shape.dims().iter().map(|&d| d as u32));
            for v in &self.views {
                p.extend(v.iter().map(|&s| s as u32));
            }
        }
        p.extend(self.scalars.iter().map(|s| s.to_bits()));
        debug_assert_eq!(p.len(), layout.len);
        p
    }

    /// Elements per thread: 4 (vec4 loads and stores) when every load is at the kernel's own index, else 1.
    /// Buffers are padded to 16 bytes, so the last vector may run past `numel` harmlessly.
    pub fn width(&self) -> usize {
        if self.views.is_empty() {
            4
        } else {
            1
        }
    }

    /// Threads the kernel runs.
    pub fn threads(&self) -> usize {
        self.shape.numel().div_ceil(self.width())
    }

    /// Bytes each buffer binding covers: the values, padded to a whole vector.
    pub fn binding_bytes(&self, numel: usize) -> u64 {
        (numel.next_multiple_of(self.width()) * 4) as u64
    }

    /// Storage buffers the kernel binds: parameters, outputs and inputs.
    pub fn bindings(&self) -> usize {
        1 + self.outputs.len() + self.inputs.len()
    }
}
