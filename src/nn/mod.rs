//! Neural-network building blocks, as `torch.nn`: layers that own their parameters as [`Var`](crate::Var)s
//! behind the [`Module`] trait, activations as functions, [`clip_grad_norm`]. [`functional`] holds the stateless
//! functions layers are made of.
//!
//! Every layer initialises its parameters as PyTorch's defaults do, from lazor's counter-based generator
//! ([`Tensor::rand`](crate::Tensor::rand)), so a seed gives the same weights on every backend.
//!
//! ```no_run
//! use lazor::nn::{self, Module};
//! use lazor::Tensor;
//! let model = nn::Sequential::new(vec![
//!     Box::new(nn::Linear::new(4, 8, true, 1)),
//!     Box::new(nn::relu),
//!     Box::new(nn::Linear::new(8, 2, true, 2)),
//! ]);
//! let y = model.forward(&Tensor::ones([3, 4]));
//! assert_eq!(y.shape(), &[3, 2]);
//! let names: Vec<String> = model.parameters().into_iter().map(|(name, _)| name).collect();
//! assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]);
//! ```

mod clip;
mod conv;
mod dropout;
mod embedding;
pub mod functional;
mod init;
mod kv_cache;
mod layer_norm;
mod linear;
mod module;
mod rms_norm;
mod rotary;
mod sequential;
mod swiglu;

pub use clip::clip_grad_norm;
pub use conv::Conv2d;
pub use dropout::Dropout;
pub use embedding::Embedding;
pub use functional::{gelu, relu, sigmoid, silu, tanh};
pub use kv_cache::KvCache;
pub use layer_norm::LayerNorm;
pub use linear::Linear;
pub use module::{prefixed, Module};
pub use rms_norm::RmsNorm;
pub use rotary::Rotary;
pub use sequential::Sequential;
pub use swiglu::SwiGlu;
