//! Element types: widths, storage, the type promotion table and casts, each said once.
//!
//! Every value is computed in a 32-bit *lane*: floats (f32, and f16 and bf16 widened) as `f32` bits, integers as
//! their own bits, bools as 0 or 1. Within a kernel f16 and bf16 values stay in f32; they are rounded to their type
//! where they are stored or cast (as torch.compile's kernels do). Storage is narrower: f16 and bf16 take 2 bytes,
//! bool 1.

use half::{bf16, f16};

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// 32-bit IEEE 754 float.
    F32,
    /// 16-bit IEEE 754 float (`half::f16`), computed in f32 and rounded to nearest even.
    F16,
    /// bfloat16 (`half::bf16`): f32's range with 8 bits of precision, computed in f32 and rounded to nearest even.
    BF16,
    /// 32-bit signed integer; arithmetic wraps.
    I32,
    /// 32-bit unsigned integer; arithmetic wraps.
    U32,
    /// `true` or `false`, stored as one byte.
    Bool,
}

/// How a dtype's values are computed: the lane type of its kernels' values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// `f32` lanes: F32, F16, BF16.
    Float,
    /// `i32` lanes.
    Int,
    /// `u32` lanes.
    Uint,
    /// `u32` lanes holding 0 or 1.
    Bool,
}

impl DType {
    /// Every dtype, for tests that sweep them.
    pub const ALL: [DType; 6] = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U32, DType::Bool];

    /// Bytes per element in memory.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::Bool => 1,
        }
    }

    /// Bytes of `n` elements as buffers hold them: whole 32-bit words, as kernels address them.
    pub(crate) fn bytes(self, n: usize) -> u64 {
        ((n * self.size_in_bytes()).next_multiple_of(4)) as u64
    }

    /// How values of this type are computed.
    pub fn class(self) -> Class {
        match self {
            DType::F32 | DType::F16 | DType::BF16 => Class::Float,
            DType::I32 => Class::Int,
            DType::U32 => Class::Uint,
            DType::Bool => Class::Bool,
        }
    }

    /// The type whose elements hold this type's lanes exactly: f32 for f16 and bf16, else itself. Partial folds
    /// are kept in it.
    pub fn lanes(self) -> DType {
        match self.class() {
            Class::Float => DType::F32,
            _ => self,
        }
    }

    /// Whether this is a floating-point type.
    pub fn is_float(self) -> bool {
        self.class() == Class::Float
    }

    /// Whether this is an integer type (not bool).
    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::U32)
    }

    /// The name users see, as in PyTorch (`f32`, `bf16`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::Bool => "bool",
        }
    }

    /// The type two operands are computed in (PyTorch's `result_type` for tensors): bool < integer < floating;
    /// within a kind the wider wins; f16 with bf16 is f32. `None` for i32 with u32, which lazor does not guess.
    pub fn promote(self, other: DType) -> Option<DType> {
        use DType::*;
        Some(match (self, other) {
            (a, b) if a == b => a,
            (Bool, x) | (x, Bool) => x,
            (I32, U32) | (U32, I32) => return None,
            (a, b) if a.is_int() => b,
            (a, b) if b.is_int() => a,
            // Two different floats: f32 with anything, or f16 with bf16.
            _ => F32,
        })
    }

    /// `x` rounded to this float type (nearest, ties to even), as an f32. Identity for f32.
    pub fn round(self, x: f32) -> f32 {
        match self {
            DType::F16 => f16::from_f32(x).to_f32(),
            DType::BF16 => bf16::from_f32(x).to_f32(),
            _ => x,
        }
    }

    /// The lane of `lane` (a value of type `from`) cast to this type, with Rust's `as` rules: float to integer
    /// truncates toward zero and saturates, NaN going to 0; integers between i32 and u32 keep their bits; to bool
    /// is `!= 0` (NaN is true); from bool is 0 or 1.
    pub fn cast_lane(self, from: DType, lane: u32) -> u32 {
        let to = self;
        match from.class() {
            Class::Float => {
                let x = f32::from_bits(lane);
                match to.class() {
                    Class::Float => to.round(x).to_bits(),
                    Class::Int => (x as i32) as u32,
                    Class::Uint => x as u32,
                    Class::Bool => (x != 0.0) as u32,
                }
            }
            Class::Int | Class::Uint | Class::Bool => {
                let as_f32 = if from.class() == Class::Int { lane as i32 as f32 } else { lane as f32 };
                match to.class() {
                    Class::Float => to.round(as_f32).to_bits(),
                    Class::Int | Class::Uint => lane,
                    Class::Bool => (lane != 0) as u32,
                }
            }
        }
    }

    /// Element `i` of a buffer of this type (`words` as stored) as a lane.
    #[inline]
    pub fn load(self, words: &[u32], i: usize) -> u32 {
        match self.size_in_bytes() {
            4 => words[i],
            2 => {
                let half = (words[i / 2] >> (16 * (i % 2))) & 0xffff;
                match self {
                    DType::F16 => f16::from_bits(half as u16).to_f32().to_bits(),
                    _ => half << 16,
                }
            }
            _ => (words[i / 4] >> (8 * (i % 4))) & 0xff,
        }
    }

    /// The stored bits of a lane: the whole lane for 32-bit types, else the low 16 or 8 bits of the result.
    #[inline]
    pub fn store_bits(self, lane: u32) -> u32 {
        match self {
            DType::F16 => f16::from_f32(f32::from_bits(lane)).to_bits() as u32,
            DType::BF16 => bf16::from_f32(f32::from_bits(lane)).to_bits() as u32,
            DType::Bool => (lane != 0) as u32,
            _ => lane,
        }
    }

    /// Lanes packed into the words a buffer of this type holds (little-endian, element 0 in the low bits).
    pub fn encode(self, lanes: &[u32]) -> Vec<u32> {
        let per = 4 / self.size_in_bytes();
        if per == 1 {
            return lanes.to_vec();
        }
        let bits = 32 / per;
        lanes
            .chunks(per)
            .map(|c| c.iter().enumerate().fold(0u32, |w, (j, &l)| w | (self.store_bits(l) << (bits * j))))
            .collect()
    }

    /// The first `n` elements of stored `words`, as lanes.
    pub fn decode(self, words: &[u32], n: usize) -> Vec<u32> {
        (0..n).map(|i| self.load(words, i)).collect()
    }

    /// The lane of the number `v` in this type: floats rounded to it, integers converted as Rust's `as` from f64
    /// (so a Rust integer scalar keeps its value, and wraps as `as` does where it does not fit).
    pub(crate) fn lane_of(self, v: Scalar) -> u32 {
        match v {
            Scalar::F32(x) => self.cast_lane(DType::F32, x.to_bits()),
            Scalar::I32(x) => self.cast_lane(DType::I32, x as u32),
            Scalar::U32(x) => self.cast_lane(DType::U32, x),
        }
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust number on one side of an operator: its own kind decides what type the other side is computed in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// An `f32`.
    F32(f32),
    /// An `i32`.
    I32(i32),
    /// A `u32`.
    U32(u32),
}

impl Scalar {
    /// The dtype a tensor of type `tensor` and this scalar compute in: a scalar of the tensor's own kind (or a
    /// lower one) does not widen the tensor (`f16 * 2.0` stays f16, `u32 + 1i32` stays u32); one of a higher kind
    /// lifts it to the scalar's own type (`i32 * 0.5` is f32, `bool + 1` is i32).
    pub fn with(self, tensor: DType) -> DType {
        match (self, tensor.class()) {
            (Scalar::F32(_), Class::Float) => tensor,
            (Scalar::F32(_), _) => DType::F32,
            (_, Class::Float | Class::Int | Class::Uint) => tensor,
            (Scalar::I32(_), Class::Bool) => DType::I32,
            (Scalar::U32(_), Class::Bool) => DType::U32,
        }
    }
}

impl From<f32> for Scalar {
    fn from(v: f32) -> Scalar {
        Scalar::F32(v)
    }
}

impl From<i32> for Scalar {
    fn from(v: i32) -> Scalar {
        Scalar::I32(v)
    }
}

impl From<u32> for Scalar {
    fn from(v: u32) -> Scalar {
        Scalar::U32(v)
    }
}

#[cfg(test)]
mod tests {
    use super::DType::*;
    use super::*;

    #[test]
    fn promotion_table() {
        let cases = [
            (F32, F16, Some(F32)),
            (F16, BF16, Some(F32)),
            (F16, F16, Some(F16)),
            (BF16, I32, Some(BF16)),
            (Bool, U32, Some(U32)),
            (Bool, Bool, Some(Bool)),
            (I32, U32, None),
            (F16, Bool, Some(F16)),
        ];
        for (a, b, want) in cases {
            assert_eq!(a.promote(b), want, "{a} with {b}");
            assert_eq!(b.promote(a), want, "{b} with {a}");
        }
    }

    #[test]
    fn casts_follow_rust_as() {
        let f = |x: f32| x.to_bits();
        assert_eq!(I32.cast_lane(F32, f(f32::NAN)), 0);
        assert_eq!(I32.cast_lane(F32, f(3e9)) as i32, i32::MAX);
        assert_eq!(I32.cast_lane(F32, f(-3e9)) as i32, i32::MIN);
        assert_eq!(I32.cast_lane(F32, f(-2.7)) as i32, -2);
        assert_eq!(U32.cast_lane(F32, f(-2.7)), 0);
        assert_eq!(Bool.cast_lane(F32, f(f32::NAN)), 1);
        assert_eq!(Bool.cast_lane(F32, f(-0.0)), 0);
        assert_eq!(U32.cast_lane(I32, (-1i32) as u32), u32::MAX);
        assert_eq!(f32::from_bits(F32.cast_lane(Bool, 1)), 1.0);
        assert_eq!(f32::from_bits(F16.cast_lane(F32, f(65520.0))), f32::INFINITY);
        assert_eq!(f32::from_bits(BF16.cast_lane(F32, f(1.0 + 1.0 / 256.0))), 1.0, "ties to even");
    }

    #[test]
    fn storage_round_trips() {
        for dt in DType::ALL {
            let lanes: Vec<u32> = (0..7).map(|i| dt.cast_lane(I32, i)).collect();
            let words = dt.encode(&lanes);
            assert_eq!(words.len() as u64 * 4, dt.bytes(7));
            assert_eq!(dt.decode(&words, 7), lanes, "{dt}");
        }
    }
}
