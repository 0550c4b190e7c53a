//! Element types: the one place that says how wide an element is and what WGSL calls it.

/// The element type of a tensor. Only `F32` exists today; codegen and buffer sizing already go through this enum so
/// that f16, i32, u32 and bool add a variant rather than a rewrite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit IEEE 754 float.
    F32,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
        }
    }

    /// The WGSL scalar type name.
    pub fn wgsl(self) -> &'static str {
        match self {
            DType::F32 => "f32",
        }
    }
}
