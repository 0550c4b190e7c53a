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
//! Data flows through the modules in this order: `tensor`, `ops` and `views` (the API) -> `graph` -> `schedule`
//! (toposort, fusion, lowering to the kernel IR, memory plan) -> `kernel` (the IR) -> `backend` (wgpu: `codegen`
//! to WGSL, then run), driven by one orchestrator, `realize`. `reference` is the CPU oracle.
#![warn(missing_docs)]

mod autograd;
mod backend;
mod codegen;
mod compare;
mod conv;
pub mod debug;
mod device;
mod dim;
mod display;
mod dtype;
mod element;
mod env;
mod error;
mod graph;
mod hash;
mod indexing;
mod kernel;
mod losses;
mod masks;
mod matmul;
pub mod nn;
#[doc(hidden)]
pub mod op;
mod ops;
pub mod optim;
mod profile;
mod random;
mod read;
mod realize;
mod reductions;
#[doc(hidden)]
pub mod reference;
pub mod safetensors;
mod schedule;
mod segments;
mod shape;
mod stats;
mod tensor;
mod view;
mod views;

pub use autograd::{no_grad, Grads, Var};
pub use compare::Operand;
pub use device::Device;
pub use dim::Dim;
pub use dtype::DType;
pub use element::Element;
pub use error::{Error, Result};
/// The `half` crate, whose `f16` and `bf16` are lazor's 16-bit element types.
pub use half;
pub use profile::{KernelProfile, Profile};
pub use read::to_vecs;
pub use shape::Shape;
pub use stats::Stats;
pub use tensor::{realize, Tensor};
