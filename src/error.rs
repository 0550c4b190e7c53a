//! The crate's error type: every failure a caller can see, from bad shapes to a lost GPU.

use crate::shape::Shape;

/// Everything that can go wrong in lazor.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Two operands of a binary op whose shapes cannot broadcast.
    #[error("lazor: {op}: shapes {lhs} and {rhs} cannot be broadcast together")]
    Broadcast {
        /// The op, as users call it.
        op: &'static str,
        /// The left operand's shape.
        lhs: Shape,
        /// The right operand's shape.
        rhs: Shape,
    },
    /// A bad argument to a view or shape op: the message names the argument; `shape` is the operand's.
    #[error("lazor: {op}: {message} (tensor of shape {shape})")]
    BadArgument {
        /// The op, as users call it.
        op: &'static str,
        /// What went wrong.
        message: String,
        /// The tensor's shape.
        shape: Shape,
    },
    /// Two operands whose shapes do not fit together (a matrix product's inner sizes).
    #[error("lazor: {op}: {message}: shapes {lhs} and {rhs}")]
    ShapeMismatch {
        /// The op, as users call it.
        op: &'static str,
        /// What does not fit.
        message: String,
        /// The left operand's shape.
        lhs: Shape,
        /// The right operand's shape.
        rhs: Shape,
    },
    /// An element type an op does not take, a pairing of types with no common type, or a read as the wrong type.
    #[error("lazor: {op}: {message}")]
    DType {
        /// The op, as users call it.
        op: &'static str,
        /// What went wrong, naming the types.
        message: String,
    },
    /// An index outside the axis it indexes, found where the index tensor is host data (checked at the call; an
    /// index computed on the device is not checked, and reads 0 or is dropped instead).
    #[error("lazor: {op}: index {index} is out of range for an axis of size {size}")]
    IndexOutOfRange {
        /// The op, as users call it.
        op: &'static str,
        /// The offending index.
        index: i64,
        /// The extent of the axis it indexes.
        size: usize,
    },
    /// A bad setting of a layer or an optimizer (a learning rate below 0, a probability outside `[0, 1)`).
    #[error("lazor: {op}: {message}")]
    Config {
        /// The constructor, as users call it.
        op: &'static str,
        /// What is wrong, naming the setting and its value.
        message: String,
    },
    /// A file that could not be read or written; `path` names it and `message` says why (the system's words).
    #[error("lazor: {path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// A file that is not a valid safetensors file: truncated, damaged, or something else altogether.
    #[error("lazor: {path}: not a valid safetensors file: {message}")]
    Corrupt {
        /// The file.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// A parameter the checkpoint holds no tensor for.
    #[error("lazor: {path}: no tensor named `{name}` for the parameter of that name")]
    MissingTensor {
        /// The checkpoint.
        path: String,
        /// The parameter's name.
        name: String,
    },
    /// A tensor of the checkpoint that no parameter is named after (loading is strict, as PyTorch's default
    /// `load_state_dict`).
    #[error("lazor: {path}: tensor `{name}` matches no parameter of the module")]
    UnexpectedTensor {
        /// The checkpoint.
        path: String,
        /// The tensor's name.
        name: String,
    },
    /// A checkpoint tensor whose shape or dtype differs from its parameter's.
    #[error("lazor: {path}: tensor `{name}` is {found}, but its parameter is {expected}")]
    TensorMismatch {
        /// The checkpoint.
        path: String,
        /// The tensor's and the parameter's name.
        name: String,
        /// The parameter's dtype and shape (`f32 [10, 784]`).
        expected: String,
        /// The tensor's dtype and shape in the file.
        found: String,
    },
    /// Operands that live on two different devices.
    #[error("lazor: {op}: operands live on different devices")]
    DeviceMismatch {
        /// The op, as users call it.
        op: &'static str,
    },
    /// A wgpu-only method called on a device of another backend (the CPU backend).
    #[error("lazor: {op}: {device} is not a wgpu device")]
    NotWgpu {
        /// The method, as users call it.
        op: &'static str,
        /// The device's name.
        device: String,
    },
    /// No adapter matched the request (`LAZOR_BACKEND`, `LAZOR_ADAPTER`) or none exists.
    #[error("lazor: no GPU adapter found ({0})")]
    NoAdapter(String),
    /// The adapter refused to create a device.
    #[error("lazor: could not create a device on {adapter}: {message}")]
    DeviceCreation {
        /// The adapter's name.
        adapter: String,
        /// What went wrong.
        message: String,
    },
    /// A tensor needs a buffer larger than the adapter can bind.
    #[error("lazor: tensor of shape {shape} needs {bytes} bytes, above this adapter's storage binding limit of {limit} bytes")]
    TooLarge {
        /// The tensor's shape.
        shape: Shape,
        /// Bytes the tensor needs.
        bytes: u64,
        /// Bytes one binding may cover on this adapter.
        limit: u64,
    },
    /// The device ran out of memory; the message names the device (the CPU backend runs out of host memory).
    #[error("lazor: out of memory: {0}")]
    OutOfMemory(String),
    /// A generated kernel did not compile; the message names the kernel.
    #[error("lazor: kernel `{kernel}` failed to compile: {message}")]
    KernelCompile {
        /// The kernel's name.
        kernel: String,
        /// What went wrong.
        message: String,
    },
    /// wgpu rejected a call: a bug in lazor, reported rather than hidden.
    #[error("lazor: wgpu validation error: {0}")]
    Validation(String),
    /// The device was lost (driver reset, GPU removed); every later realize on it fails too.
    #[error("lazor: device lost: {0}")]
    DeviceLost(String),
    /// Mapping a buffer for read back failed.
    #[error("lazor: read back failed: {0}")]
    ReadBack(String),
    /// A call that waits for the GPU, made in the browser (wasm32) on a WebGPU device: the page's one thread cannot
    /// wait, since the GPU's answer arrives through that thread's event loop. `twin` is the call to await instead.
    #[error(
        "lazor: {op} cannot wait for the GPU in the browser (the page's one thread would hang); await {twin} instead"
    )]
    WouldBlock {
        /// The blocking call, as users call it.
        op: &'static str,
        /// Its awaitable twin, as users call it (`to_vec_async()`).
        twin: &'static str,
    },
    /// A bad value for a `LAZOR_*` environment variable.
    #[error("lazor: {var}={value}: {message}")]
    Env {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What went wrong.
        message: String,
    },
}

impl Error {
    /// The same error, its message naming the device it came from (a runtime failure: memory, a kernel, a lost
    /// device, a read-back).
    pub(crate) fn on_device(self, device: &str) -> Error {
        let named = |m: String| if m.starts_with(device) { m } else { format!("{device}: {m}") };
        match self {
            Error::OutOfMemory(m) => Error::OutOfMemory(named(m)),
            Error::Validation(m) => Error::Validation(named(m)),
            Error::DeviceLost(m) => Error::DeviceLost(named(m)),
            Error::ReadBack(m) => Error::ReadBack(named(m)),
            Error::KernelCompile { kernel, message } => Error::KernelCompile { kernel, message: named(message) },
            other => other,
        }
    }
}

/// `Result` with lazor's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The value of a `try_` twin, or a panic with its error at the caller's line.
#[track_caller]
pub(crate) fn ok<T>(r: Result<T>) -> T {
    match r {
        Ok(t) => t,
        Err(e) => panic!("{e}"),
    }
}

/// Locks `m`, also after a panic elsewhere left it poisoned: every lock of the wgpu backend guards state that stays
/// consistent between statements.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_errors_name_their_device_once() {
        let e = Error::OutOfMemory("4096 bytes of host memory".into()).on_device("CPU (2 threads)");
        assert_eq!(e.to_string(), "lazor: out of memory: CPU (2 threads): 4096 bytes of host memory");
        let again = e.on_device("CPU (2 threads)");
        assert_eq!(again.to_string(), "lazor: out of memory: CPU (2 threads): 4096 bytes of host memory");
        let lost = Error::DeviceLost("driver reset".into()).on_device("NVIDIA H200 (Vulkan)");
        assert!(lost.to_string().contains("NVIDIA H200 (Vulkan): driver reset"));
        let shape = Error::DType { op: "add", message: "x".into() }.on_device("gpu");
        assert_eq!(shape.to_string(), "lazor: add: x");
    }
}
