//! lazor: lazy, fused GPU tensors on wgpu.
//!
//! Write tensor math as if it ran eagerly; nothing runs until a value is needed. Then lazor orders the expression
//! graph, fuses every elementwise chain (views and concatenations included) into one generated WGSL kernel, plans
//! buffers so no intermediate outlives its last use, and submits the whole realize to the GPU at once.
//!
//! ```no_run
//! use lazor::Tensor;
//! let a = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]);
//! let b = Tensor::from_slice(&[10.0, 20.0, 30.0], [3]);
//! let c = (a + &b) * 5.0;
//! let d = 1.0 - &c / 2.0;
//! assert_eq!(d.to_vec()[0], 1.0 - 55.0 / 2.0);
//! ```
//!
//! Data flows through the modules in this order: `autograd`, `nn` and `optim` above the API -> `tensor` (the
//! `Tensor` type and its methods) -> `device` and `realize` (the orchestrator) -> `graph` -> `schedule` (toposort,
//! fusion, lowering to the kernel IR, memory plan) -> `kernel` (the IR) -> `backend` (CPU: run the IR; wgpu:
//! `codegen` to WGSL, then run), on base files (`shape`, `dtype`, `view`, `op`, `philox`, `error`, ...) that import
//! nothing above them. `reference` is the tests' CPU oracle.
#![warn(missing_docs)]

// Above the API: gradients, layers, optimizers, checkpoints.
mod autograd;
pub mod nn;
pub mod optim;
pub mod safetensors;
// The API: the `Tensor` type and every file of its methods.
mod tensor;
// The orchestrator and the handle users hold.
mod device;
mod profile;
mod realize;
// The graph, the scheduler and the kernel IR.
mod graph;
mod kernel;
mod schedule;
// The backends: the CPU interpreter of the IR, and wgpu (WGSL generation, then run).
mod backend;
// The ground floor.
mod buffer;
mod dtype;
mod env;
mod error;
mod hash;
#[doc(hidden)]
pub mod op;
mod philox;
mod shape;
mod view;
// The tests' oracle: an interpreter over the graph.
#[doc(hidden)]
pub mod reference;

pub use autograd::{no_grad, Grads, Var};
pub use backend::wgpu::WgpuDevice;
pub use device::Device;
pub use dtype::DType;
pub use error::{Error, Result};
/// The `half` crate, whose `f16` and `bf16` are lazor's 16-bit element types.
pub use half;
pub use profile::{KernelProfile, Profile, Stats};
pub use shape::Shape;
pub use tensor::autocast::{autocast, autocast_dtype, try_autocast};
pub use tensor::compare::Operand;
pub use tensor::debug;
pub use tensor::dim::Dim;
pub use tensor::element::Element;
pub use tensor::read::to_vecs;
pub use tensor::read_async::{realize_async, to_vecs_async};
pub use tensor::write::Position;
pub use tensor::{realize, Tensor};
