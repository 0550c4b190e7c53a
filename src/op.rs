//! The op set: every operation a graph node can hold, with its user-facing name.
//!
//! Semantics live in one place, `reference.rs`; WGSL spelling in one place, `codegen.rs`.

/// Elementwise operations of one operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Exp,
    Ln,
    Sqrt,
    Rsqrt,
    Abs,
    Relu,
    Sigmoid,
    Tanh,
    Sin,
    Cos,
    Recip,
    Square,
    Gelu,
    Silu,
}

/// Elementwise operations of two operands, broadcast by NumPy's rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    /// NaN-propagating maximum (as `numpy.maximum`).
    Max,
    /// NaN-propagating minimum (as `numpy.minimum`).
    Min,
    /// `a.powf(b)`, with Rust's rules for negative bases and integer exponents.
    Pow,
}

impl UnaryOp {
    /// Every unary op, for tests that sweep the op set.
    pub const ALL: [UnaryOp; 15] = [
        UnaryOp::Neg,
        UnaryOp::Exp,
        UnaryOp::Ln,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Abs,
        UnaryOp::Relu,
        UnaryOp::Sigmoid,
        UnaryOp::Tanh,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Recip,
        UnaryOp::Square,
        UnaryOp::Gelu,
        UnaryOp::Silu,
    ];

    /// The method name users call.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Exp => "exp",
            UnaryOp::Ln => "ln",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Abs => "abs",
            UnaryOp::Relu => "relu",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Recip => "recip",
            UnaryOp::Square => "square",
            UnaryOp::Gelu => "gelu",
            UnaryOp::Silu => "silu",
        }
    }
}

impl BinaryOp {
    /// Every binary op, for tests that sweep the op set.
    pub const ALL: [BinaryOp; 7] =
        [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Max, BinaryOp::Min, BinaryOp::Pow];

    /// The method name users call.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Max => "maximum",
            BinaryOp::Min => "minimum",
            BinaryOp::Pow => "powf",
        }
    }
}
