//! The crate's error type: every failure a caller can see, from bad shapes to a lost GPU.

use crate::shape::Shape;

/// Everything that can go wrong in lazor.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Two operands of a binary op whose shapes cannot broadcast.
    #[error("lazor: {op}: shapes {lhs} and {rhs} cannot be broadcast together")]
    Broadcast { op: &'static str, lhs: Shape, rhs: Shape },
    /// Operands that live on two different devices.
    #[error("lazor: {op}: operands live on different devices")]
    DeviceMismatch { op: &'static str },
    /// No adapter matched the request (`LAZOR_BACKEND`, `LAZOR_ADAPTER`) or none exists.
    #[error("lazor: no GPU adapter found ({0})")]
    NoAdapter(String),
    /// The adapter refused to create a device.
    #[error("lazor: could not create a device on {adapter}: {message}")]
    DeviceCreation { adapter: String, message: String },
    /// A tensor needs a buffer larger than the adapter can bind.
    #[error("lazor: tensor of shape {shape} needs {bytes} bytes, above this adapter's storage binding limit of {limit} bytes")]
    TooLarge { shape: Shape, bytes: u64, limit: u64 },
    /// The device ran out of memory.
    #[error("lazor: out of GPU memory: {0}")]
    OutOfMemory(String),
    /// A generated kernel did not compile; the message names the kernel.
    #[error("lazor: kernel `{kernel}` failed to compile: {message}")]
    KernelCompile { kernel: String, message: String },
    /// wgpu rejected a call: a bug in lazor, reported rather than hidden.
    #[error("lazor: wgpu validation error: {0}")]
    Validation(String),
    /// The device was lost (driver reset, GPU removed); every later realize on it fails too.
    #[error("lazor: device lost: {0}")]
    DeviceLost(String),
    /// Mapping a buffer for read back failed.
    #[error("lazor: read back failed: {0}")]
    ReadBack(String),
    /// A bad value for a `LAZOR_*` environment variable.
    #[error("lazor: {var}={value}: {message}")]
    Env { var: &'static str, value: String, message: String },
}

/// `Result` with lazor's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
