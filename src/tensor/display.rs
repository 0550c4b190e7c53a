//! Printing a tensor's values as PyTorch does: nested brackets, aligned columns, summarized past 1000 elements,
//! reading back only the elements printed.

use crate::dtype::DType;
use crate::error::Result;
use crate::tensor::Tensor;
use std::fmt;

/// Tensors with more elements than this print summarized (PyTorch's `threshold`).
const THRESHOLD: usize = 1000;
/// Elements kept at each end of a long axis when summarized (PyTorch's `edgeitems`).
const EDGE: usize = 3;

/// One printed position along an axis: an element's index in the narrowed tensor, or the `...` between the ends.
#[derive(Clone, Copy)]
enum Item {
    At(usize),
    Gap,
}

impl Tensor {
    /// The elements to print: every long axis narrowed to its ends (lazily: only these are computed and read), and
    /// per axis what each printed position shows.
    fn printed(&self) -> (Tensor, Vec<Vec<Item>>) {
        let summarize = self.numel() > THRESHOLD;
        let mut t = self.clone();
        let mut items = Vec::with_capacity(self.ndim());
        for (d, &n) in self.shape().iter().enumerate() {
            if summarize && n > 2 * EDGE {
                t = Tensor::cat(&[&t.narrow(d, 0, EDGE), &t.narrow(d, n - EDGE, EDGE)], d);
                let mut axis: Vec<Item> = (0..EDGE).map(Item::At).collect();
                axis.push(Item::Gap);
                axis.extend((EDGE..2 * EDGE).map(Item::At));
                items.push(axis);
            } else {
                items.push((0..n).map(Item::At).collect());
            }
        }
        (t, items)
    }

    /// The printed elements' texts, row-major over the narrowed tensor.
    fn printed_texts(t: &Tensor) -> Result<Vec<String>> {
        t.device.check_blocking("Display", "to_string_async()")?;
        Ok(match t.dtype() {
            DType::F32 | DType::F16 | DType::BF16 => float_texts(&t.to_dtype(DType::F32).try_to_vec()?),
            DType::I32 => texts(t.try_to_vec_as::<i32>()?),
            DType::U32 => texts(t.try_to_vec_as::<u32>()?),
            DType::Bool => texts(t.try_to_vec_as::<bool>()?),
        })
    }

    /// [`Tensor::printed_texts`], awaiting the read.
    async fn printed_texts_async(t: &Tensor) -> Result<Vec<String>> {
        Ok(match t.dtype() {
            DType::F32 | DType::F16 | DType::BF16 => float_texts(&t.to_dtype(DType::F32).to_vec_async().await?),
            DType::I32 => texts(t.to_vec_as_async::<i32>().await?),
            DType::U32 => texts(t.to_vec_as_async::<u32>().await?),
            DType::Bool => texts(t.to_vec_as_async::<bool>().await?),
        })
    }

    /// The text `Display` prints, from the printed elements' texts (or why they could not be read).
    fn shown(&self, t: &Tensor, items: &[Vec<Item>], texts: Result<Vec<String>>) -> String {
        let body = match texts {
            Err(e) => format!("<not read: {e}>"),
            Ok(texts) if self.ndim() == 0 => texts[0].clone(),
            Ok(_) if self.numel() == 0 => "[]".to_string(),
            Ok(texts) => {
                let width =
                    texts.iter().map(String::len).max().unwrap_or(0).max(if self.numel() > THRESHOLD { 3 } else { 0 });
                let mut out = String::new();
                block(&mut out, &texts, width, t.shape(), items, 0, 0);
                out
            }
        };
        format!("tensor({body}, shape={:?}, dtype={}, device={})", self.shape(), self.dtype(), self.device().name())
    }

    /// What `Display` prints (`format!("{t}")`), as a future: the printed elements are read back without blocking.
    /// In the browser (wasm32), how a WebGPU tensor is printed; `Display` there prints why it could not read.
    ///
    /// # Errors
    /// Device failures, as [`Tensor::try_to_vec`] (`Display` prints them in place of the values instead).
    ///
    /// # Examples
    /// ```
    /// # fn main() -> lazor::Result<()> { pollster::block_on(async {
    /// let dev = lazor::Device::cpu();
    /// let x = lazor::Tensor::from_vec_on(vec![1.0, 2.5], [2], &dev);
    /// assert_eq!(x.to_string_async().await?, format!("{x}"));
    /// assert!(x.to_string_async().await?.starts_with("tensor([1.0000, 2.5000], shape=[2]"));
    /// # Ok(()) }) }
    /// ```
    pub fn to_string_async(&self) -> impl std::future::Future<Output = Result<String>> + Send + 'static {
        let this = self.clone();
        async move {
            let (t, items) = this.printed();
            let texts = Tensor::printed_texts_async(&t).await?;
            Ok(this.shown(&t, &items, Ok(texts)))
        }
    }
}

/// Values as their `to_string`.
fn texts<T: ToString>(values: Vec<T>) -> Vec<String> {
    values.iter().map(T::to_string).collect()
}

/// Floats in one style for all, as PyTorch chooses it: `1.` when every finite value is an integer, scientific
/// when the magnitudes span more than 1000x or leave [1e-4, 1e8], else four decimals.
fn float_texts(values: &[f32]) -> Vec<String> {
    let finite: Vec<f32> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let abs_nonzero = || finite.iter().map(|v| v.abs()).filter(|&v| v > 0.0);
    let (max, min) = (abs_nonzero().fold(0.0f32, f32::max), abs_nonzero().fold(f32::INFINITY, f32::min));
    let integral = finite.iter().all(|v| v.fract() == 0.0);
    let sci = if integral { max > 1e8 } else { max > 1e8 || min < 1e-4 || (min > 0.0 && max / min > 1000.0) };
    values
        .iter()
        .map(|&v| match v {
            v if v.is_nan() => "nan".to_string(),
            v if v.is_infinite() => if v > 0.0 { "inf" } else { "-inf" }.to_string(),
            v if sci => scientific(v),
            v if integral => format!("{v:.0}."),
            v => format!("{v:.4}"),
        })
        .collect()
}

/// `v` as PyTorch's `1.2345e+03`.
fn scientific(v: f32) -> String {
    let s = format!("{v:.4e}");
    let (mantissa, exp) = s.split_once('e').expect("an exponent");
    let exp: i32 = exp.parse().expect("a decimal exponent");
    format!("{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
}

/// Writes the block of axis `d` starting at flat index `base` (row-major over the narrowed shape `dims`).
fn block(out: &mut String, texts: &[String], width: usize, dims: &[usize], items: &[Vec<Item>], d: usize, base: usize) {
    let indent = " ".repeat("tensor(".len() + d + 1);
    let stride: usize = dims[d + 1..].iter().product();
    out.push('[');
    let last = d + 1 == dims.len();
    for (k, item) in items[d].iter().enumerate() {
        if k > 0 {
            out.push(',');
            if last {
                out.push(' ');
            } else {
                // A blank line between blocks of three or more axes, as PyTorch does.
                out.push_str(&"\n".repeat(dims.len() - d - 1));
                out.push_str(&indent);
            }
        }
        match (item, last) {
            (Item::Gap, true) => out.push_str(&format!("{:>width$}", "...")),
            (Item::Gap, false) => out.push_str("..."),
            (Item::At(i), true) => out.push_str(&format!("{:>width$}", texts[base + i])),
            (Item::At(i), false) => block(out, texts, width, dims, items, d + 1, base + i * stride),
        }
    }
    out.push(']');
}

/// Values as PyTorch prints them, then `shape=[..], dtype=.., device=..`. Printing realizes and reads back only
/// the printed elements: a summarized 2^26-element tensor reads a few dozen values.
///
/// # Examples
/// ```no_run
/// let x = lazor::Tensor::from_vec(vec![1.0, 2.5, -3.0, 4.0], [2, 2]);
/// println!("{x}");
/// // tensor([[ 1.0000,  2.5000],
/// //         [-3.0000,  4.0000]], shape=[2, 2], dtype=f32, device=...)
/// ```
impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (t, items) = self.printed();
        let texts = Tensor::printed_texts(&t);
        f.write_str(&self.shown(&t, &items, texts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_styles_follow_pytorch() {
        assert_eq!(float_texts(&[1.0, -2.0, 30.0]), ["1.", "-2.", "30."]);
        assert_eq!(float_texts(&[1.5, -0.25]), ["1.5000", "-0.2500"]);
        assert_eq!(float_texts(&[1.0, 12345.0, 0.5]), ["1.0000e+00", "1.2345e+04", "5.0000e-01"]);
        assert_eq!(float_texts(&[1e-5, 1.0]), ["1.0000e-05", "1.0000e+00"]);
        assert_eq!(float_texts(&[f32::NAN, f32::NEG_INFINITY, 2.0]), ["nan", "-inf", "2."]);
        assert_eq!(scientific(-1.5e-12), "-1.5000e-12");
    }
}
