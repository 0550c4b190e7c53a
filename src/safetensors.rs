//! Checkpoints in the safetensors format, through the `safetensors` crate: `save`, `load`, and loading into named
//! parameters (what `Module::save` and `Module::load` call).
//!
//! safetensors is the format PyTorch (`safetensors.torch`), candle and the Hugging Face hub exchange weights in: a
//! little-endian length, a JSON header naming each tensor's dtype, shape and byte range, then the raw bytes. Every
//! lazor dtype has its safetensors twin (`F32`, `F16`, `BF16`, `I32`, `U32`, and `BOOL`, one byte per element as
//! lazor stores it), and lazor's buffers hold elements in the file's byte order, so saving is one read-back of
//! every tensor and loading one upload. A file is parsed and checked whole before anything is made of it: bad
//! bytes give an [`Error`], never a panic.

use crate::autograd::Var;
use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::shape::Shape;
use crate::tensor::Tensor;
use ::safetensors::tensor::{Dtype, SafeTensorError, SafeTensors, View};
use std::borrow::Cow;
use std::path::Path;

/// One tensor's bytes as the file holds them.
struct Bytes {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &Bytes {
    fn dtype(&self) -> Dtype {
        self.dtype
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }

    fn data_len(&self) -> usize {
        self.data.len()
    }
}

/// The safetensors dtype of a lazor dtype.
fn file_dtype(dtype: DType) -> Dtype {
    match dtype {
        DType::F32 => Dtype::F32,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::I32 => Dtype::I32,
        DType::U32 => Dtype::U32,
        DType::Bool => Dtype::BOOL,
    }
}

/// The lazor dtype of a safetensors dtype, if lazor has one.
fn lazor_dtype(dtype: Dtype) -> Option<DType> {
    Some(match dtype {
        Dtype::F32 => DType::F32,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::I32 => DType::I32,
        Dtype::U32 => DType::U32,
        Dtype::BOOL => DType::Bool,
        _ => return None,
    })
}

/// `path` as errors name it.
fn shown(path: &Path) -> String {
    path.display().to_string()
}

/// Writes `tensors` to a safetensors file at `path`, each under its name, in one read-back per device (realizing
/// what is lazy). The file is written next to `path` and then renamed over it, so a failed save leaves an existing
/// file as it was. The order of `tensors` does not matter: the format orders tensors by dtype and name.
///
/// # Errors
/// [`Error::BadArgument`] when a name appears twice, [`Error::Io`] when the file cannot be written, and device
/// failures as [`Tensor::try_to_vec`].
///
/// # Examples
/// ```no_run
/// use lazor::Tensor;
/// let w = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]);
/// let labels = Tensor::from_vec(vec![3i32, 1], [2]);
/// lazor::safetensors::save("weights.safetensors", &[("w", &w), ("labels", &labels)])?;
/// let back = lazor::safetensors::load("weights.safetensors")?;
/// assert_eq!(back[0].0, "w"); // f32 before i32: the file's order
/// assert_eq!(back[0].1.to_vec(), vec![1.0, 2.0, 3.0, 4.0]);
/// # Ok::<(), lazor::Error>(())
/// ```
pub fn save(path: impl AsRef<Path>, tensors: &[(&str, &Tensor)]) -> Result<()> {
    let path = path.as_ref();
    for (i, (name, t)) in tensors.iter().enumerate() {
        if tensors[..i].iter().any(|(other, _)| other == name) {
            return Err(Error::BadArgument {
                op: "safetensors::save",
                message: format!("the name `{name}` is given to two tensors"),
                shape: t.shape.clone(),
            });
        }
    }
    let words = crate::tensor::read::read_words(tensors.iter().map(|(_, t)| *t))?;
    let bytes: Vec<Bytes> = tensors
        .iter()
        .zip(words)
        .map(|((_, t), words)| {
            let len = t.numel() * t.dtype.size_in_bytes();
            let data = words.iter().flat_map(|w| w.to_le_bytes()).take(len).collect();
            Bytes { dtype: file_dtype(t.dtype), shape: t.shape.dims().to_vec(), data }
        })
        .collect();
    let named = tensors.iter().zip(&bytes).map(|((name, _), b)| (*name, b));
    ::safetensors::serialize_to_file(named, None, path).map_err(|e| match e {
        SafeTensorError::IoError(io) => Error::Io { path: shown(path), message: io.to_string() },
        other => Error::Io { path: shown(path), message: other.to_string() },
    })
}

/// The tensors of the safetensors file at `path`, with their names, in the file's order, on the default device
/// (host data, uploaded by the first realize that reads them).
///
/// # Errors
/// [`Error::Io`] when the file cannot be read, [`Error::Corrupt`] when it is not a valid safetensors file
/// (truncated, a damaged header, offsets that do not add up), [`Error::DType`] for a tensor of a type lazor does
/// not have (`F64`, `I64`, `U8`, ...).
///
/// # Examples
/// ```no_run
/// for (name, t) in lazor::safetensors::load("model.safetensors")? {
///     println!("{name}: {} {:?}", t.dtype(), t.shape());
/// }
/// # Ok::<(), lazor::Error>(())
/// ```
pub fn load(path: impl AsRef<Path>) -> Result<Vec<(String, Tensor)>> {
    load_on(path, &Device::default())
}

/// [`load`] onto `device`.
///
/// # Errors
/// As [`load`].
pub fn load_on(path: impl AsRef<Path>, device: &Device) -> Result<Vec<(String, Tensor)>> {
    let path = path.as_ref();
    let file = read(path)?;
    let parsed = parse(path, &file)?;
    parsed
        .into_iter()
        .map(|entry| {
            let dtype = entry.lazor_dtype(path)?;
            let t = tensor(entry.data, &entry.shape, dtype, device);
            Ok((entry.name, t))
        })
        .collect()
}

/// One tensor of a parsed file.
struct Entry<'a> {
    name: String,
    dtype: Dtype,
    shape: Vec<usize>,
    data: &'a [u8],
}

impl Entry<'_> {
    /// The tensor's lazor dtype, or the error naming the one lazor lacks.
    fn lazor_dtype(&self, path: &Path) -> Result<DType> {
        lazor_dtype(self.dtype).ok_or_else(|| Error::DType {
            op: "safetensors::load",
            message: format!(
                "{}: tensor `{}` is {:?}, which lazor has no type for (it reads F32, F16, BF16, I32, U32 and BOOL)",
                shown(path),
                self.name,
                self.dtype
            ),
        })
    }

    /// `dtype [shape]`, as errors show a tensor.
    fn kind(&self) -> String {
        let dtype = lazor_dtype(self.dtype).map_or(format!("{:?}", self.dtype), |d| d.to_string());
        format!("{dtype} {}", Shape::from(self.shape.as_slice()))
    }
}

/// The file's bytes.
fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::Io { path: shown(path), message: e.to_string() })
}

/// The file's tensors in the order of their bytes, every header field checked by the `safetensors` crate
/// (lengths, offsets covering the data exactly, sizes without overflow).
fn parse<'a>(path: &Path, file: &'a [u8]) -> Result<Vec<Entry<'a>>> {
    let corrupt = |e: SafeTensorError| Error::Corrupt { path: shown(path), message: e.to_string() };
    let (_, metadata) = SafeTensors::read_metadata(file).map_err(corrupt)?;
    let tensors = SafeTensors::deserialize(file).map_err(corrupt)?;
    metadata
        .offset_keys()
        .into_iter()
        .map(|name| {
            let view = tensors.tensor(&name).map_err(corrupt)?;
            Ok(Entry { dtype: view.dtype(), shape: view.shape().to_vec(), data: view.data(), name })
        })
        .collect()
}

/// A tensor of `dtype` and `shape` on `device` holding the file's `data` (its size checked by the parser).
fn tensor(data: &[u8], shape: &[usize], dtype: DType, device: &Device) -> Tensor {
    let words: Vec<u32> = data
        .chunks(4)
        .map(|c| {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            // A bool is 0 or 1 in lazor: any other byte the file holds is true.
            if dtype == DType::Bool {
                w.iter_mut().for_each(|b| *b = u8::from(*b != 0));
            }
            u32::from_le_bytes(w)
        })
        .collect();
    Tensor::from_words(device, words, Shape::from(shape), dtype)
}

/// Loads the file at `path` into `params` by name (see `Module::load`): the whole file and every name, dtype and
/// shape are checked first, then the values are uploaded in one realize per device and moved into the `Var`s.
pub(crate) fn load_into(path: &Path, params: &[(String, Var)]) -> Result<()> {
    let file = read(path)?;
    let entries = parse(path, &file)?;
    let mut values = Vec::with_capacity(params.len());
    for (name, var) in params {
        let entry = entries
            .iter()
            .find(|e| &e.name == name)
            .ok_or_else(|| Error::MissingTensor { path: shown(path), name: name.clone() })?;
        let dtype = lazor_dtype(entry.dtype);
        if dtype != Some(var.dtype) || entry.shape != var.shape.dims() {
            return Err(Error::TensorMismatch {
                path: shown(path),
                name: name.clone(),
                expected: format!("{} {}", var.dtype, var.shape),
                found: entry.kind(),
            });
        }
        values.push(tensor(entry.data, &entry.shape, var.dtype, &var.device));
    }
    if let Some(extra) = entries.iter().find(|e| !params.iter().any(|(name, _)| name == &e.name)) {
        return Err(Error::UnexpectedTensor { path: shown(path), name: extra.name.clone() });
    }
    crate::tensor::realize(&values.iter().collect::<Vec<_>>())?;
    for ((_, var), value) in params.iter().zip(values) {
        var.try_set(value)?;
    }
    Ok(())
}
