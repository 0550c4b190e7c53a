//! The kernel IR: what one dispatch computes, as the scheduler hands it to a backend. No wgpu, and no graph nodes:
//! buffers are slots of the plan, constants are parameters.
//!
//! Buffers are named by *slots* of the plan's buffer table, so a backend runs kernels without reading the graph.
//! Sizes, strides, offsets and constants live in the kernel's parameter block; the instructions only index it, so
//! the same structure at another size compiles to the same code.

use crate::dtype::DType;
use crate::op::{BinaryOp, ReduceOp, Tri, UnaryOp};
use crate::shape::Shape;
use smallvec::{smallvec, SmallVec};

/// What kind of kernel this is. Each kind has its own codegen template.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// One thread per element (or per 4 elements) of the iteration shape; any number of same-shaped outputs.
    Elementwise,
    /// A fold along one axis of the iteration shape, with an elementwise prologue (what is folded) and epilogue
    /// (what is computed from the folded value).
    Reduce(Reduce),
    /// A workgroup per row of the iteration shape along `axis` (the innermost), running [`Kernel::phases`] in
    /// order: folds of the row, each able to read the folds before it, and maps over the row that read them. The
    /// row is read from memory once; later phases find it in cache. Softmax and layer norm are one such kernel.
    Rows {
        axis: usize,
        /// Parameter index of the team size: threads per row, as in [`Reduce::team_at`].
        team_at: usize,
        /// `Some(p)`: phase `p` is a `Max` fold of a value and phase `p + 1` a `Sum` fold of
        /// `exp(value - clamp(max, f32::MIN, f32::MAX))`, logsumexp's two folds. A GPU computes both in one pass
        /// over the row (a running maximum per thread and a sum rescaled as it grows), so a row too long to stay in
        /// cache is read once instead of twice; the CPU backend runs the two phases as written.
        online: Option<usize>,
    },
    /// A batched matrix product over the output's shape `[..., m, n]`, tiled, with its operands' expressions run on
    /// their loads and an elementwise epilogue before the one store.
    Matmul(Matmul),
}

/// Steps of k the tensor-core kernel (`kernels/matmul_coop.wgsl`) stages per slab.
pub const COOP_BK: u32 = 32;

/// How a matmul kernel reads and tiles. Instructions `..a_end` compute operand A at coordinates `[..., row, k]`
/// (its value in `a`), `a_end..b_end` operand B at `[..., k, col]` (value `b`), and the rest is the epilogue at
/// `[..., row, col]`, where [`Instr::Reduced`] is the product. All three index the kernel's rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Matmul {
    pub a: usize,
    pub a_end: usize,
    pub b: usize,
    pub b_end: usize,
    /// Parameter index of the inner size k.
    pub k_at: usize,
    /// Whether the operand's memory is contiguous along k (A row-major, B transposed): its tile is then read along
    /// k, otherwise along its rows (A) or columns (B), so neighbouring threads read neighbouring addresses.
    pub a_along_k: bool,
    pub b_along_k: bool,
    pub tile: MatmulTile,
    /// A thin product's kernel instead of tiles: `tile` is then unused.
    pub thin: Option<Thin>,
    /// Whether the tiled kernel stores 4 neighbouring columns at once, as one 16-byte vector per output: n is a
    /// multiple of 4 (so a thread's 4 columns are all inside or all past n) and every output is f32.
    pub quad: bool,
    /// Whether the tiled kernel's blocks cover m, n and k exactly (each a multiple of BM, BN and BK), so its slab
    /// fetches need no bounds checks.
    pub even: bool,
    /// Whether A (B) is fetched 16 bytes at a time: an even product whose operand is one load of an f32 input that
    /// nothing else in the kernel reads, contiguous along the axis its slab is fetched along, with every quad of 4
    /// elements 16-byte aligned. Its input is then bound as `vec4<f32>`.
    pub vec_a: bool,
    pub vec_b: bool,
    /// Whether A (B), where the product runs on tensor cores, is fetched in whole 16-byte octets of 8 halves with no
    /// check at run time: m, n and k are multiples of BM, BN and [`COOP_BK`], and the operand is one load of an f16
    /// input with stride 1 along its slab lines and every other stride and its offset a multiple of 8. Other
    /// kernels ignore it.
    pub octets_a: bool,
    pub octets_b: bool,
    /// The triangle of each batch matrix the product keeps ([`Tri`]): the tiled kernel skips the steps of k and the
    /// output blocks it drops. Such products always run tiled.
    pub tri: Tri,
}

/// A thin product's layout: each thread holds a sum per output of the narrow side (at most [`THIN_SIDE`]) in
/// registers, so the wide operand (A for few columns, B for few rows) is read once.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Thin {
    /// Whether the narrow side is the columns (otherwise the rows).
    pub columns: bool,
    /// Whether a team of [`THIN_TEAM`] threads per wide output walks k (the wide operand is contiguous along k);
    /// otherwise a thread per wide output walks all of k, neighbours reading neighbours.
    pub team: bool,
    /// Outputs along the narrow side: a constant of the kernel, so that every loop over them unrolls and the sums stay
    /// in registers (with a run-time bound, NVIDIA's compiler kept them in memory and the kernel ran far slower).
    pub narrow: u8,
}

/// The most outputs along the narrow side of a [`Thin`] product.
pub const THIN_SIDE: usize = 16;
/// Threads per wide output of a [`Thin`] product with a team.
pub const THIN_TEAM: usize = 32;
/// Steps of k a [`Thin`] product stages per slab of its narrow operand (`KC` in `kernels/matmul_thin.wgsl`).
pub const THIN_SLAB: usize = 256;

impl Thin {
    /// The layout of an `m x n` product with at most [`THIN_SIDE`] outputs along a side, given `contiguous(a, last)`:
    /// whether operand A (else B) is contiguous along its last axis (else its second last). The narrow side is the
    /// columns where `n` is the smaller; the other operand is the wide one. `None` where the wide operand is contiguous
    /// along neither axis, and for a vector times a matrix walked by threads: with one narrow output a fold reads the
    /// matrix once too, and did so faster than the thin kernel on slices of k (`[1, 4096] x [4096, 4096]`; figures:
    /// docs/notes/source-measurements.md, `src/kernel.rs`). The scheduler and `Tensor::matmul`'s cut of k both ask.
    pub fn choose(m: usize, n: usize, contiguous: impl Fn(bool, bool) -> bool) -> Option<Thin> {
        let columns = n <= THIN_SIDE && m > n;
        // A's k axis is its last, B's its second last.
        let along = |a: bool, along_k: bool| contiguous(a, a == along_k);
        let team = along(columns, true);
        if !team && (!along(columns, false) || m.min(n) == 1) {
            return None;
        }
        Some(Thin { columns, team, narrow: m.min(n) as u8 })
    }

    /// Wide outputs per workgroup: a team's worth of threads each, or one thread each.
    pub fn lines(self) -> usize {
        let wg = WORKGROUP_SIZE as usize;
        if self.team {
            wg / THIN_TEAM
        } else {
            wg
        }
    }

    /// Workgroups for `batch` products of `m` x `n` outputs.
    pub fn groups(self, m: usize, n: usize, batch: usize) -> usize {
        let wide = if self.columns { m } else { n };
        batch * wide.div_ceil(self.lines())
    }
}

/// A matmul's blocking: a workgroup computes `bm` x `bn` outputs, staging `bk` steps of k of both operands in
/// workgroup memory; each thread computes `tm` x `tn` of them in registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatmulTile {
    pub bm: u32,
    pub bn: u32,
    pub bk: u32,
    pub tm: u32,
    pub tn: u32,
}

impl MatmulTile {
    /// Workgroups covering `m` x `n` outputs.
    pub fn groups(&self, m: usize, n: usize) -> usize {
        m.div_ceil(self.bm as usize) * n.div_ceil(self.bn as usize)
    }

    /// Bytes of workgroup memory the tiled kernel stages its slabs of both operands in (f32): `bk` lines of each,
    /// padded by one vector (`SA`, `SB` in `kernels/matmul.wgsl`). The deep large tile's 16896 bytes are past
    /// WebGPU's minimum of 16384, which the slabs alone would fit.
    pub fn workgroup_bytes(&self) -> u32 {
        (self.bm + 4 + self.bn + 4) * self.bk * 4
    }
}

/// The blockings a backend's tiled matmuls choose from by shape, and how many workgroups keep its device busy.
/// Large tiles reuse each loaded element the most (8 x 8 outputs per thread), but a GPU needs a few workgroups
/// per compute unit: products with fewer `large` tiles than `min_large_groups` take `small` ones. Thin products
/// take a tile that matches their shape first (`tall` for at most 64 columns, `wide` for at most 64 rows and for
/// tensor cores), so that no half of a large tile computes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatmulTiles {
    pub large: MatmulTile,
    pub small: MatmulTile,
    pub tall: MatmulTile,
    pub wide: MatmulTile,
    /// The large tile where both operands are fetched 16 bytes at a time ([`Matmul::vec_a`]): twice as deep, so
    /// each barrier covers twice the products (without quads the deeper slab's fetch registers cost more than it
    /// saves: docs/matmul.md).
    pub deep: MatmulTile,
    /// Every triangular product's ([`Tri`]): small and square, so that more of its blocks lie wholly outside the
    /// triangle and are skipped. Causal attention's `[256, 256]` scores keep 10 of 16 such blocks against 3 of 4 large
    /// ones, and its `[256, 64]` products with a masked A walk 5/8 of k against 3/4 on tall tiles; they ran faster for
    /// it, though each block alone is slower (docs/matmul.md).
    pub tri: MatmulTile,
    pub min_large_groups: usize,
}

impl MatmulTiles {
    /// The table tuned by `bench shapes` on a GPU of 132 compute units (docs/matmul.md): 256 large workgroups are about
    /// two per compute unit, and a training step's [4096 x 1024] outputs (exactly 256 large tiles) ran faster on them
    /// than on 1024 smaller ones (figures: docs/notes/source-measurements.md, `src/kernel.rs`).
    pub const TUNED: MatmulTiles = MatmulTiles {
        large: MatmulTile { bm: 128, bn: 128, bk: 8, tm: 8, tn: 8 },
        small: MatmulTile { bm: 64, bn: 128, bk: 16, tm: 4, tn: 8 },
        tall: MatmulTile { bm: 128, bn: 64, bk: 16, tm: 8, tn: 4 },
        wide: MatmulTile { bm: 64, bn: 128, bk: 16, tm: 4, tn: 8 },
        deep: MatmulTile { bm: 128, bn: 128, bk: 16, tm: 8, tn: 8 },
        tri: MatmulTile { bm: 64, bn: 64, bk: 16, tm: 4, tn: 4 },
        min_large_groups: 256,
    };

    /// The table for a device with `workgroup_bytes` of workgroup memory that wants `busy` workgroups in flight:
    /// the tuned shapes that fit (the small tile stands in for one that does not), the threshold scaled.
    pub fn fitted(workgroup_bytes: u32, busy: usize) -> MatmulTiles {
        let t = MatmulTiles::TUNED;
        let fit = |tile: MatmulTile| if tile.workgroup_bytes() <= workgroup_bytes { tile } else { t.small };
        MatmulTiles {
            large: fit(t.large),
            small: t.small,
            tall: fit(t.tall),
            wide: fit(t.wide),
            // Not the small tile in its place: the large one, where only the shallower slab fits.
            deep: if t.deep.workgroup_bytes() <= workgroup_bytes { t.deep } else { fit(t.large) },
            tri: fit(t.tri),
            min_large_groups: busy.max(1),
        }
    }
}

/// One phase of a [`Kind::Rows`] kernel.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Fold the value of instruction `value`, computed by `body` per element of the row, with `op`; its result is
    /// [`Instr::Folded`] to later phases, and is stored at the row's index to `outputs[output]` if set.
    Fold { op: ReduceOp, body: std::ops::Range<usize>, value: usize, output: Option<usize> },
    /// Compute `body` per element of the row and store the outputs `outputs` (indices into `Kernel::outputs`).
    Map { body: std::ops::Range<usize>, outputs: Vec<usize> },
}

/// How a reduce kernel folds. The kernel's `shape` is the folded domain; its outputs have that shape with the
/// axis at extent 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reduce {
    pub op: ReduceOp,
    pub axis: usize,
    /// Whether every axis after `axis` has extent 1 (the folded elements are adjacent): then a workgroup folds
    /// each output, its threads striding along the axis and meeting in a tree. Otherwise each thread folds one
    /// output, walking the axis, so neighbouring threads read neighbouring elements.
    pub rows: bool,
    /// Instructions `0..prologue` compute the element being folded, `value` holding it; the rest are the epilogue.
    pub prologue: usize,
    pub value: usize,
    /// Parameter index of the number of chunks the axis is cut into (a team or thread per chunk and output).
    pub chunks_at: usize,
    /// Parameter index of the team size: how many threads fold one (output, chunk) in `rows` mode (32, 64, 128 or
    /// 256, a power of two at least as large as a subgroup), so a workgroup folds `256 / team` of them at once.
    pub team_at: usize,
    /// Columns only: a team of threads (the team size parameter: 1 to 256, a power of two) folds each (output,
    /// chunk), each thread striding along the axis by the team size, the team meeting in a tree in workgroup
    /// memory; neighbouring threads still fold neighbouring outputs. For a fold of many partials per output, and
    /// for a long column fold over enough columns, in one pass (`schedule/reduce.rs`, `ONE_PASS_CHUNKS`).
    pub column_team: bool,
    /// A first stage: each chunk's fold goes to `outputs[0]`, laid out as the domain with the axis at the number of
    /// chunks, for a second kernel to fold; no epilogue.
    pub partial: bool,
}

/// How a load reads 4 consecutive elements in a vectorized kernel (scalar kernels read one element either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// At the kernel's own element index: the input has the kernel's shape and is read in order.
    Own,
    /// Through a view whose innermost stride is 1 and whose start is 4-aligned: one 16-byte load.
    Vector,
    /// Through a view whose innermost stride is 0: one element, repeated.
    Splat,
    /// Through any other view: 4 separate loads.
    Gather,
    /// From workgroup tile `n` of [`Kernel::tiles`], which the workgroup filled with coalesced reads.
    Tile(usize),
}

/// Threads per workgroup of every generated kernel: a launch constant of the IR (the scheduler sizes teams and
/// chunks by it, `Kernel::threads` counts by it), which codegen spells and the backends dispatch by.
pub const WORKGROUP_SIZE: u32 = 256;

/// Side of the square tiles of a tiled kernel, along the two innermost axes.
pub const TILE: usize = 32;

/// A strided read's parameters: `rank` strides then the offset, starting at `Kernel::params[at]`, in the
/// coordinates of frame `frame`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ViewRef {
    pub at: usize,
    pub frame: usize,
}

/// Coordinates in which a load is indexed. Frame 0 is the kernel's own; every other frame is its parent with one
/// axis shifted back by a parameter (the start of one part of a concatenation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    pub parent: usize,
    pub axis: usize,
    /// Parameter index of the shift (an `i32`).
    pub shift: usize,
}

/// One part of an [`Instr::Cat`]: taken where the selecting coordinate is below `bound`; computed by the
/// instructions `body` (emitted only on that branch), its value in instruction `value`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CatPart {
    /// Parameter index of the exclusive upper bound (an `i32`).
    pub bound: usize,
    /// The frame the part's loads are indexed in.
    pub frame: usize,
    pub body: std::ops::Range<usize>,
    pub value: usize,
}

/// One instruction of a kernel body, in SSA form: operands are indices of earlier instructions.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Instr {
    /// Read input `input` at the kernel's own index (`view: None`) or through a strided view.
    Load {
        input: usize,
        view: Option<ViewRef>,
        access: Access,
    },
    /// The parameter at `Kernel::params[i]`: a lane of the instruction's type.
    Scalar(usize),
    Unary(UnaryOp, usize),
    /// Both operands are lanes of one class; a comparison gives a bool lane, anything else the instruction's type.
    Binary(BinaryOp, usize, usize),
    /// Instruction `a`'s value converted to this instruction's type ([`DType::cast_lane`]).
    Cast(usize),
    /// Per element, the second operand where the first (a bool lane) is 1, else the third.
    Select(usize, usize, usize),
    /// The element index (an i32 lane) that a view computes at the kernel's coordinates, or the kernel's own
    /// index: an arange read through that view.
    Index {
        view: Option<ViewRef>,
    },
    /// Random numbers of a distribution: element `index` (instruction `.1`, an i32 lane read as u32) under the
    /// key of instructions `.2` and `.3` (u32 lanes), as `random::sample` defines it from Philox4x32-10.
    Random(crate::philox::Distribution, usize, usize, usize),
    /// Input `input` at element `base + index * stride` (`base` and `index` i32 lanes, `stride` the i32 parameter
    /// at `stride_at`) where `0 <= index < extent` (the parameter after it), else 0: a gather along one axis.
    /// Kernels holding one run one element per thread.
    Gather {
        input: usize,
        base: usize,
        index: usize,
        stride_at: usize,
    },
    /// In a reduce kernel's epilogue: the folded value.
    Reduced,
    /// In a rows kernel: the result of its `n`th fold phase, the same for the whole row. In a reduce kernel's
    /// epilogue: its `n`th sibling fold's value at the output.
    Folded(usize),
    /// The part of a concatenation that the coordinate `axis` of frame `frame` falls in: the first part whose
    /// bound exceeds it.
    Cat {
        frame: usize,
        axis: usize,
        parts: Vec<CatPart>,
    },
}

impl Instr {
    /// The instructions it reads, each once (a concatenation's parts are read inside it, so not here).
    pub fn operands(&self) -> SmallVec<[usize; 3]> {
        let mut v: SmallVec<[usize; 3]> = match self {
            Instr::Unary(_, a) | Instr::Cast(a) => smallvec![*a],
            Instr::Binary(_, a, b) | Instr::Gather { base: a, index: b, .. } => smallvec![*a, *b],
            Instr::Random(_, c, a, b) | Instr::Select(c, a, b) => smallvec![*c, *a, *b],
            _ => SmallVec::new(),
        };
        v.sort_unstable();
        v.dedup();
        v
    }
}

/// A kernel: an iteration shape, buffers by slot, a body and its parameters.
#[derive(Clone, Debug)]
pub struct Kernel {
    pub kind: Kind,
    /// The iteration space, which every output has.
    pub shape: Shape,
    /// Plan slots read, in binding order, each with whether every load of it is a whole 16-byte vector.
    pub inputs: Vec<(usize, bool)>,
    /// The element type of each input.
    pub in_types: Vec<DType>,
    /// Plan slots written, each with the instruction holding its value.
    pub outputs: Vec<(usize, usize)>,
    /// The element type each output is stored as.
    pub out_types: Vec<DType>,
    pub body: Vec<Instr>,
    /// The type of each instruction's value: f16 and bf16 values are rounded to their type as they are computed.
    pub types: Vec<DType>,
    /// Coordinate frames beyond the kernel's own (frame 0).
    pub frames: Vec<Frame>,
    /// The parameter block, as `u32` words: `numel` first, then whatever the instructions index. Values, not
    /// structure: a new size, offset or constant changes these and compiles nothing.
    pub params: Vec<u32>,
    /// The parameters that hold a constant of the realize, each with the constant's place in the realize's order
    /// of nodes: the plan cache writes another realize's constants there when it reuses the plan. Backends ignore
    /// it.
    pub consts: Vec<(usize, u32)>,
    /// Where the kernel's extents start in `params`, when the body needs per-axis coordinates (a strided load or a
    /// concatenation).
    pub dims_at: Option<usize>,
    /// Elements per thread: 4 (vec4) or 1.
    pub width: usize,
    /// Groups of `width` elements per thread in a linear elementwise kernel: 2 where its elements are 16-bit, so
    /// that a thread has as many bytes of loads in flight as a thread of f32 vectors (see `widen.rs`); else 1.
    pub vectors: usize,
    /// Strided reads (input, view parameter index) staged through workgroup memory: non-empty makes the kernel *tiled*,
    /// each workgroup computing a `TILE` x `TILE` block of the two innermost axes. A view whose stride is 1 along
    /// the rows and not along the columns (a transposed operand) is read down columns, so loading it by element
    /// touches a new cache line per element; a tile reads it along its rows and hands it over transposed.
    pub tiles: Vec<(usize, usize)>,
    /// The phases of a [`Kind::Rows`] kernel. In a [`Kind::Reduce`] kernel: its sibling folds, each a
    /// [`Phase::Fold`] of a value its prologue computes (`output` unused), along the same axis in the same walk as
    /// the main fold (`schedule/siblings.rs`); a first pass stores sibling `n`'s partials to output `n + 1`. Empty
    /// for other kinds.
    pub phases: Vec<Phase>,
    /// Outputs stored into an input's buffer, as (input, output) pairs: the input's value dies with this kernel,
    /// which reads it only at its own index before storing (an optimizer state replaced by its update). Backends
    /// bind the buffer once, as the output, and read the input from there (the CPU backend writes a new buffer
    /// and lets the input's go).
    pub aliases: Vec<(usize, usize)>,
    /// Where the one output of a matmul kernel is stored through a view: the parameter index of its strides (one
    /// per axis of the kernel's shape) and offset, `i32`s. Its buffer is then another node's (a copy of the product
    /// into another layout, which the scheduler removed: `schedule/redirect.rs`), which other kernels may write
    /// parts of too; the first of them to run allocates it. `None`: stored at the kernel's own index.
    pub store_view: Option<usize>,
    /// Where an elementwise kernel stores its one output: at the element index instruction `.0` holds (an `i32`
    /// inside the output's buffer) rather than at the kernel's own index. A slice written into a larger buffer
    /// whose other elements stay as they are (`Tensor::write_at`, `schedule/write.rs`). `None`: at its own index.
    pub scatter: Option<usize>,
    /// Graph ops this kernel computes, for debugging output.
    pub fused_ops: usize,
    /// Whether this kernel runs in one dispatch with the kernel before it (`schedule/dispatch.rs`): the two neither
    /// read nor write what the other writes, so a GPU runs them side by side, each on its own range of
    /// workgroups. A backend that runs kernels one by one may ignore it.
    pub joins: bool,
}

impl Kernel {
    /// A reduce kernel's folds in one walk, each as (op, instruction folded): its main fold, then its siblings
    /// (`phases`). Empty for other kinds.
    pub fn folds(&self) -> Vec<(ReduceOp, usize)> {
        let Kind::Reduce(r) = self.kind else { return Vec::new() };
        let siblings = self.phases.iter().map(|p| match p {
            Phase::Fold { op, value, .. } => (*op, *value),
            Phase::Map { .. } => unreachable!("a reduce kernel's phases are sibling folds"),
        });
        std::iter::once((r.op, r.value)).chain(siblings).collect()
    }

    /// Parameter `at` as the `i32` it holds (a stride, offset, shift or bound).
    pub fn signed(&self, at: usize) -> i64 {
        self.params[at] as i32 as i64
    }

    /// Threads the kernel runs.
    pub fn threads(&self) -> usize {
        let wg = WORKGROUP_SIZE as usize;
        if let Kind::Rows { team_at, .. } = self.kind {
            let per = wg / self.params[team_at] as usize;
            return (self.params[0] as usize).div_ceil(per) * wg;
        }
        if let Kind::Reduce(r) = self.kind {
            let outputs = self.params[0] as usize;
            let chunks = self.params[r.chunks_at] as usize;
            if r.rows {
                let per = wg / self.params[r.team_at] as usize;
                return (outputs * chunks).div_ceil(per) * wg;
            }
            let per = if r.column_team { wg / self.params[r.team_at] as usize } else { wg };
            return outputs.div_ceil(per) * chunks * wg;
        }
        if let Kind::Matmul(mm) = self.kind {
            let d = self.shape.dims();
            let (m, n) = (d[d.len() - 2], d[d.len() - 1]);
            let batch = self.shape.numel() / (m * n);
            return match mm.thin {
                Some(thin) => thin.groups(m, n, batch) * wg,
                None => mm.tile.groups(m, n) * batch * wg,
            };
        }
        if self.tiles.is_empty() {
            return self.shape.numel().div_ceil(self.width).div_ceil(self.vectors);
        }
        let d = self.shape.dims();
        let (rows, cols) = (d[d.len() - 2], d[d.len() - 1]);
        let batch: usize = d[..d.len() - 2].iter().product();
        rows.div_ceil(TILE) * cols.div_ceil(TILE) * batch * WORKGROUP_SIZE as usize
    }

    /// The kernel's name in profiles, `LAZOR_DEBUG` lines and WGSL labels: what it computes, then its iteration
    /// shape, e.g. `matmul+add+relu [4096x4096]` or `max+sub+exp+sum+div [4096x4096]` (a softmax).
    pub fn name(&self) -> String {
        let head = match self.kind {
            Kind::Matmul(_) => Some("matmul"),
            Kind::Reduce(r) => Some(r.op.name()),
            Kind::Elementwise | Kind::Rows { .. } => None,
        };
        let op_of = |instr: &Instr| -> Option<&'static str> {
            Some(match instr {
                Instr::Unary(op, _) => op.name(),
                Instr::Binary(op, ..) => op.name(),
                Instr::Cast(_) => "cast",
                Instr::Select(..) => "where",
                Instr::Cat { .. } => "cat",
                Instr::Random(d, ..) => d.name(),
                Instr::Gather { .. } => "gather",
                _ => return None,
            })
        };
        let mut ops: Vec<&'static str> = head.into_iter().collect();
        if !matches!(self.kind, Kind::Rows { .. }) {
            ops.extend(self.body.iter().filter_map(op_of));
            return kernel_name(&ops, self.shape.dims());
        }
        // A rows kernel: each phase's ops, then the fold it ends with.
        for phase in &self.phases {
            let (body, fold) = match phase {
                Phase::Fold { op, body, .. } => (body, Some(op.name())),
                Phase::Map { body, .. } => (body, None),
            };
            ops.extend(self.body[body.clone()].iter().filter_map(op_of));
            ops.extend(fold);
        }
        kernel_name(&ops, self.shape.dims())
    }

    /// Storage buffers the kernel binds: parameters, outputs and inputs (an input stored into is bound once, as
    /// its output).
    pub fn bindings(&self) -> usize {
        1 + self.outputs.len() + self.inputs.len() - self.aliases.len()
    }

    /// The range of binding numbers its WGSL declares: parameters, outputs, inputs (an input stored into leaves
    /// its number unused).
    pub fn binding_span(&self) -> usize {
        1 + self.outputs.len() + self.inputs.len()
    }

    /// Bytes of workgroup memory its WGSL declares, at most; `None` for a product that may run on tensor cores
    /// (both operands f16), whose kernel the backend picks by its adapter. Grouped kernels
    /// (`schedule/dispatch.rs`) share a workgroup's memory limit.
    pub fn workgroup_bytes(&self) -> Option<u32> {
        let f32s = |n: usize| n as u32 * 4;
        Some(match self.kind {
            Kind::Matmul(mm) if self.types[mm.a] == DType::F16 && self.types[mm.b] == DType::F16 => return None,
            Kind::Matmul(Matmul { thin: Some(thin), .. }) => f32s(THIN_SLAB * thin.narrow as usize),
            Kind::Matmul(mm) => mm.tile.workgroup_bytes(),
            Kind::Reduce(_) | Kind::Rows { .. } => f32s(WORKGROUP_SIZE as usize),
            Kind::Elementwise => f32s(self.tiles.len() * TILE * (TILE + 1)),
        })
    }
}

/// A kernel's name from the ops it computes, in order, and its iteration shape: `exp+add [4096x4096]`; a kernel
/// that only moves values is `copy`.
pub fn kernel_name(ops: &[&str], shape: &[usize]) -> String {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    // Each op once, where it first appears: a rows kernel recomputes its map in every phase.
    let mut once: Vec<&str> = Vec::with_capacity(ops.len());
    for op in ops {
        if !once.contains(op) {
            once.push(op);
        }
    }
    let what = if once.is_empty() { "copy".to_string() } else { once.join("+") };
    format!("{what} [{}]", dims.join("x"))
}

/// The kernels of each dispatch, in order: a kernel that [`Kernel::joins`] runs in the dispatch of the one before.
pub fn dispatches(kernels: &[Kernel]) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for (n, k) in kernels.iter().enumerate() {
        match out.last_mut() {
            Some(last) if k.joins => last.end = n + 1,
            _ => out.push(n..n + 1),
        }
    }
    out
}
