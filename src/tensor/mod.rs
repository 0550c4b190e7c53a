//! `Tensor`: a cheap handle to a graph node, its constructors, and the verbs that evaluate it.

pub(crate) mod autocast;
pub(crate) mod compare;
pub(crate) mod conv;
pub mod debug;
pub(crate) mod dim;
pub(crate) mod display;
pub(crate) mod element;
pub(crate) mod indexing;
pub(crate) mod losses;
pub(crate) mod masks;
pub(crate) mod matmul;
pub(crate) mod ops;
pub(crate) mod random;
pub(crate) mod read;
pub(crate) mod read_async;
pub(crate) mod reductions;
pub(crate) mod seam;
pub(crate) mod segments;
pub(crate) mod views;
pub(crate) mod write;

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::{NodeId, NodeOp};
use crate::shape::Shape;
use crate::tensor::element::Element;
use std::fmt;

/// A lazy n-dimensional array of one element type ([`DType`]) on a [`Device`].
///
/// Operations build graph nodes; nothing runs until a value is needed ([`Tensor::to_vec`], [`Tensor::realize`]).
/// Cloning is cheap (a handle); dropping the last handle frees the node and, once nothing needs it, its buffer.
///
/// # Examples
/// ```no_run
/// use lazor::Tensor;
/// let a = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3]);
/// let b = Tensor::from_slice(&[10.0, 20.0, 30.0], [3]);
/// let c = (a + &b) * 5.0;
/// assert_eq!(c.shape(), &[2, 3]);
/// assert_eq!(c.to_vec()[0], 55.0);
/// ```
pub struct Tensor {
    pub(crate) id: NodeId,
    pub(crate) shape: Shape,
    pub(crate) dtype: DType,
    pub(crate) device: Device,
    /// Where the value came from in the gradient tape, for a tensor that depends on a [`Var`](crate::Var); `None`
    /// for an untracked one. The tape lives here, at the API level, because the graph forgets a node's op once it
    /// is realized and composes views at construction.
    pub(crate) tape: Option<crate::autograd::Tape>,
}

impl Tensor {
    /// Wraps a new node of `device`'s graph.
    pub(crate) fn from_op(device: &Device, op: NodeOp, shape: Shape, dtype: DType) -> Tensor {
        let node_shape = shape.clone();
        let id = device.add_node(|g| g.add(op, node_shape, dtype));
        Tensor { id, shape, dtype, device: device.clone(), tape: None }
    }

    /// A tensor holding `data` (row-major) on the default device; its dtype is `T`'s.
    ///
    /// # Panics
    /// If `data.len()` differs from the number of elements of `shape`.
    ///
    /// # Examples
    /// ```no_run
    /// use lazor::{DType, Tensor};
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], [2, 2]);
    /// let labels = Tensor::from_vec(vec![3i32, 1], [2]);
    /// assert_eq!((x.dtype(), labels.dtype()), (DType::F32, DType::I32));
    /// ```
    #[track_caller]
    pub fn from_vec<T: Element>(data: Vec<T>, shape: impl Into<Shape>) -> Tensor {
        Tensor::from_vec_on(data, shape, &Device::default())
    }

    /// [`Tensor::from_vec`] on `device`.
    ///
    /// # Panics
    /// If `data.len()` differs from the number of elements of `shape`.
    #[track_caller]
    pub fn from_vec_on<T: Element>(data: Vec<T>, shape: impl Into<Shape>, device: &Device) -> Tensor {
        let shape = shape.into();
        assert!(
            data.len() == shape.numel(),
            "lazor: from_vec: data has {} elements but shape {shape} needs {}",
            data.len(),
            shape.numel()
        );
        Tensor::from_op(device, NodeOp::Data(T::into_words(data)), shape, T::DTYPE)
    }

    /// A tensor holding a copy of `data` on the default device.
    ///
    /// # Panics
    /// If `data.len()` differs from the number of elements of `shape`.
    #[track_caller]
    pub fn from_slice<T: Element>(data: &[T], shape: impl Into<Shape>) -> Tensor {
        Tensor::from_vec(data.to_vec(), shape)
    }

    /// [`Tensor::from_slice`] on `device`.
    ///
    /// # Panics
    /// If `data.len()` differs from the number of elements of `shape`.
    #[track_caller]
    pub fn from_slice_on<T: Element>(data: &[T], shape: impl Into<Shape>, device: &Device) -> Tensor {
        Tensor::from_vec_on(data.to_vec(), shape, device)
    }

    /// `value` everywhere, of `T`'s dtype. Costs no memory until realized on its own: kernels read it as a
    /// parameter.
    pub fn full<T: Element>(shape: impl Into<Shape>, value: T) -> Tensor {
        Tensor::full_on(shape, value, &Device::default())
    }

    /// [`Tensor::full`] on `device`.
    pub fn full_on<T: Element>(shape: impl Into<Shape>, value: T, device: &Device) -> Tensor {
        Tensor::from_op(device, NodeOp::Const(value.to_lane()), shape.into(), T::DTYPE)
    }

    /// `value` (a lane of `dtype`) everywhere.
    pub(crate) fn full_lane(shape: impl Into<Shape>, lane: u32, dtype: DType, device: &Device) -> Tensor {
        Tensor::from_op(device, NodeOp::Const(lane), shape.into(), dtype)
    }

    /// Zeros (f32).
    pub fn zeros(shape: impl Into<Shape>) -> Tensor {
        Tensor::full(shape, 0.0)
    }

    /// [`Tensor::zeros`] on `device`.
    pub fn zeros_on(shape: impl Into<Shape>, device: &Device) -> Tensor {
        Tensor::full_on(shape, 0.0, device)
    }

    /// Ones (f32).
    pub fn ones(shape: impl Into<Shape>) -> Tensor {
        Tensor::full(shape, 1.0)
    }

    /// [`Tensor::ones`] on `device`.
    pub fn ones_on(shape: impl Into<Shape>, device: &Device) -> Tensor {
        Tensor::full_on(shape, 1.0, device)
    }

    /// Zeros of a dtype chosen at run time (`false` for bool).
    pub fn zeros_dtype(shape: impl Into<Shape>, dtype: DType) -> Tensor {
        Tensor::full_lane(shape, dtype.cast_lane(DType::I32, 0), dtype, &Device::default())
    }

    /// Ones of a dtype chosen at run time (`true` for bool).
    pub fn ones_dtype(shape: impl Into<Shape>, dtype: DType) -> Tensor {
        Tensor::full_lane(shape, dtype.cast_lane(DType::I32, 1), dtype, &Device::default())
    }

    /// `0, 1, ..., n - 1` as i32, shape `[n]`, on the default device. Costs no memory until realized on its own.
    pub fn arange(n: usize) -> Tensor {
        Tensor::arange_on(n, &Device::default())
    }

    /// [`Tensor::arange`] on `device`.
    pub fn arange_on(n: usize, device: &Device) -> Tensor {
        Tensor::from_op(device, NodeOp::Arange, Shape::from([n]), DType::I32)
    }

    /// A tensor of shape `[]` holding `value`.
    pub fn scalar<T: Element>(value: T) -> Tensor {
        Tensor::full([], value)
    }

    /// [`Tensor::scalar`] on `device`.
    pub fn scalar_on<T: Element>(value: T, device: &Device) -> Tensor {
        Tensor::full_on([], value, device)
    }

    /// The extent of each axis.
    pub fn shape(&self) -> &[usize] {
        self.shape.dims()
    }

    /// Number of axes.
    pub fn ndim(&self) -> usize {
        self.shape.ndim()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.numel()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The device the tensor lives on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Whether the value is already in a device buffer (realized or uploaded).
    pub fn is_realized(&self) -> bool {
        matches!(self.device.state().graph.node(self.id).op, NodeOp::Buffer)
    }

    /// Computes the tensor into a device buffer without reading it back: at most one submit, none while the GPU is
    /// busy (the realize joins a batch the device submits later). The GPU may still be working, or not yet have
    /// started, when this returns; [`Device::synchronize`] waits.
    ///
    /// # Errors
    /// Device failures: out of memory, a lost device, a kernel that does not compile, a tensor too large to bind.
    pub fn realize(&self) -> Result<()> {
        self.device.run(&[self.id], &[]).map(drop)
    }
}

impl Tensor {
    /// This tensor's values on `device`: one copy, read back from this device and uploaded to the other (counted
    /// in their `Stats` where bytes cross between host and GPU). The same tensor when it already lives there.
    ///
    /// # Panics
    /// On a device failure; [`Tensor::try_to_device`] returns it instead.
    #[track_caller]
    pub fn to_device(&self, device: &Device) -> Tensor {
        crate::error::ok(self.try_to_device(device))
    }

    /// [`Tensor::to_device`], returning an error instead of panicking.
    ///
    /// # Errors
    /// As [`Tensor::try_to_vec`].
    pub fn try_to_device(&self, device: &Device) -> Result<Tensor> {
        if self.device.same(device) {
            return Ok(self.clone());
        }
        self.device.check_blocking("to_device()", "to_device_async()")?;
        let words = self.device.read(&[self.id])?.pop().expect("one output");
        Ok(Tensor::from_op(device, NodeOp::Data(words), self.shape.clone(), self.dtype))
    }
}

/// Realizes several tensors together: one realize (at most one submit) per device, and subexpressions they share
/// are computed once.
///
/// # Errors
/// As [`Tensor::realize`].
///
/// # Examples
/// ```no_run
/// let x = lazor::Tensor::from_vec(vec![1.0, 2.0], [2]);
/// let e = x.exp();
/// let (a, b) = (&e + 1.0, &e * 2.0);
/// lazor::realize(&[&a, &b])?; // one kernel computes exp once and writes both
/// # Ok::<(), lazor::Error>(())
/// ```
pub fn realize(tensors: &[&Tensor]) -> Result<()> {
    let mut rest: Vec<&Tensor> = tensors.to_vec();
    while let Some(first) = rest.first() {
        let device = first.device.clone();
        let (mine, others): (Vec<&Tensor>, Vec<&Tensor>) = rest.into_iter().partition(|t| t.device.same(&device));
        let ids: Vec<NodeId> = mine.iter().map(|t| t.id).collect();
        device.run(&ids, &[])?;
        rest = others;
    }
    Ok(())
}

impl Clone for Tensor {
    fn clone(&self) -> Self {
        self.device.state().graph.retain(self.id);
        Tensor {
            id: self.id,
            shape: self.shape.clone(),
            dtype: self.dtype,
            device: self.device.clone(),
            tape: self.tape.clone(),
        }
    }
}

impl Drop for Tensor {
    fn drop(&mut self) {
        let mut state = self.device.state();
        let mut freed = Vec::new();
        state.graph.release(self.id, &mut freed);
        self.device.free(&mut state.stats, freed);
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tensor")
            .field("shape", &self.shape)
            .field("dtype", &self.dtype())
            .field("realized", &self.is_realized())
            .finish()
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<Tensor>();
    check::<Device>();
    check::<Error>();
    check::<crate::Var>();
    check::<crate::Grads>();
}
