//! lazor: lazy, fused GPU tensors on wgpu.
//!
//! Write tensor math as if it ran eagerly; nothing runs until a value is needed. Then lazor orders the expression
//! graph, fuses every elementwise chain into one generated WGSL kernel, plans buffers so no intermediate outlives
//! its last use, and submits the whole realize to the GPU at once.
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
//! Data flows through the modules in this order: [`tensor`]/`ops` (the API) -> [`graph`] -> [`schedule`]
//! (toposort, fusion, memory plan) -> [`codegen`] (WGSL) -> `runtime` (wgpu). [`reference`] is the CPU oracle.

pub mod codegen;
mod device;
pub mod dtype;
mod env;
mod error;
pub mod graph;
pub mod op;
mod ops;
pub mod reference;
mod runtime;
pub mod schedule;
pub mod shape;
mod stats;
pub mod tensor;

pub use device::Device;
pub use dtype::DType;
pub use error::{Error, Result};
pub use shape::Shape;
pub use stats::Stats;
pub use tensor::{realize, to_vecs, Tensor};
