//! How a kernel's instructions map onto the CPU backend's batch registers: pairs, register reuse, vector reads.

use crate::dtype::Class;
use crate::dtype::DType;
use crate::kernel::{Instr, Kernel, Kind, Phase};
use crate::op::{BinaryOp, UnaryOp};
use smallvec::SmallVec;

/// How one instruction runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Step {
    /// Its own loop (or, for a load, a window of the input).
    Plain,
    /// Computed inside the pair of the instruction that reads it, never on its own.
    Skip,
    /// `op2(op1(x, y), s)` (or `op2(s, op1(x, y))` where `scalar_left`) in one loop, `op1(x, y)` being the
    /// skipped instruction before it: `(x + b) * 0.5` then costs one pass over the batch, not two.
    Pair { op1: BinaryOp, x: usize, y: usize, op2: BinaryOp, s: f32, scalar_left: bool },
    /// `u(op1(x, y))` in one loop, `op1(x, y)` being the skipped instruction before it; an operand with a value in
    /// `cx` / `cy` is that constant: `exp(x * 0.1)`, `sqrt(v + eps)`, `relu(x + b)`.
    Mapped { u: UnaryOp, op1: BinaryOp, x: usize, y: usize, cx: Option<f32>, cy: Option<f32> },
}

/// A kernel's instructions laid out over registers, computed once per kernel run.
pub(super) struct Plan {
    pub step: Vec<Step>,
    /// For each instruction, the register holding its values, and how many registers there are.
    pub slot: Vec<usize>,
    pub slots: usize,
    /// For each float constant, its value: a binary op with one constant operand runs as its own loop.
    pub scalar: Vec<Option<f32>>,
    /// For each instruction, whether anything reads it as a vector (a constant read only as a binary op's
    /// constant operand is never filled).
    pub vector_read: Vec<bool>,
}

/// The arithmetic a pair fuses: one loop per combination is compiled, so the set stays small.
fn pairable(op: BinaryOp) -> bool {
    matches!(op, BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div)
}

/// The unary ops a [`Step::Mapped`] applies: the common activations and `exp`/`sqrt` (one loop each per pairable
/// op and operand form is compiled).
pub(super) fn mappable(op: UnaryOp) -> bool {
    matches!(op, UnaryOp::Exp | UnaryOp::Sqrt | UnaryOp::Relu | UnaryOp::Tanh | UnaryOp::Sigmoid | UnaryOp::Abs)
}

/// Which range of the body each instruction is evaluated in (reduce: prologue, epilogue; rows: per phase).
fn ranges(k: &Kernel) -> Vec<usize> {
    let mut range = vec![0usize; k.body.len()];
    match k.kind {
        Kind::Reduce(r) => range[r.prologue..].iter_mut().for_each(|x| *x = 1),
        // Operand A, operand B and the epilogue are evaluated apart.
        Kind::Matmul(mm) => {
            range[mm.a_end..mm.b_end].iter_mut().for_each(|x| *x = 1);
            range[mm.b_end..].iter_mut().for_each(|x| *x = 2);
        }
        Kind::Rows { .. } => {
            for (p, phase) in k.phases.iter().enumerate() {
                let (Phase::Fold { body, .. } | Phase::Map { body, .. }) = phase;
                range[body.clone()].iter_mut().for_each(|x| *x = p + 1);
            }
        }
        _ => {}
    }
    range
}

/// Values read after their range is evaluated: outputs, a reduce kernel's folded value, a matmul's operands, a
/// fold phase's value.
fn read_after(k: &Kernel) -> Vec<bool> {
    let mut after = vec![false; k.body.len()];
    for &(_, v) in &k.outputs {
        after[v] = true;
    }
    // A slice write's places are stored beside its values (`scatter.rs`).
    if let Some(at) = k.scatter {
        after[at] = true;
    }
    match k.kind {
        Kind::Reduce(r) => after[r.value] = true,
        Kind::Matmul(mm) => (after[mm.a], after[mm.b]) = (true, true),
        _ => {}
    }
    for phase in &k.phases {
        if let Phase::Fold { value, .. } = phase {
            after[*value] = true;
        }
    }
    after
}

impl Plan {
    pub fn new(k: &Kernel) -> Plan {
        let n = k.body.len();
        let scalar: Vec<Option<f32>> = k
            .body
            .iter()
            .zip(&k.types)
            .map(|(instr, dt)| match instr {
                Instr::Scalar(at) if dt.class() == Class::Float => Some(f32::from_bits(k.params[*at])),
                _ => None,
            })
            .collect();
        let mut plan =
            Plan { step: vec![Step::Plain; n], slot: (0..n).collect(), slots: n, scalar, vector_read: vec![true; n] };
        // A concatenation's parts are evaluated apart and read what they read as vectors: one register each.
        if !k.body.iter().any(|i| matches!(i, Instr::Cat { .. })) {
            let (range, after) = (ranges(k), read_after(k));
            pairs(k, &plan.scalar, &range, &after, &mut plan.step);
            plan.registers(k, &range, after.clone());
            plan.vector_read = after;
            for q in 0..n {
                for o in plan.reads(k, q) {
                    plan.vector_read[o] = true;
                }
            }
        }
        plan
    }

    /// The instructions `q` reads as vectors as its step runs: a pair reads the operands of the op it absorbed, and
    /// a float binary op reads a constant operand as a value, not a vector.
    pub fn reads(&self, k: &Kernel, q: usize) -> SmallVec<[usize; 3]> {
        let vector = |c: Option<f32>| c.is_none();
        let (x, y) = match (self.step[q], &k.body[q]) {
            (Step::Skip, _) => return SmallVec::new(),
            (Step::Pair { x, y, .. }, _) => (Some(x), Some(y)),
            (Step::Mapped { x, y, cx, cy, .. }, _) => (vector(cx).then_some(x), vector(cy).then_some(y)),
            // As the Binary arm of `eval` reads them: a constant right operand, else a constant left operand, is
            // read as a value.
            (Step::Plain, &Instr::Binary(op, a, b)) if k.types[q].class() == Class::Float && !op.is_compare() => {
                match (self.scalar[a], self.scalar[b]) {
                    (_, Some(_)) => (Some(a), None),
                    (Some(_), None) => (None, Some(b)),
                    (None, None) => (Some(a), Some(b)),
                }
            }
            (Step::Plain, instr) => return instr.operands(),
        };
        let mut v: SmallVec<[usize; 3]> = x.into_iter().collect();
        v.extend(y.filter(|y| Some(*y) != x));
        v
    }

    /// Assigns each instruction a register, reusing one once the last instruction reading it has run: a chain of
    /// n ops then keeps a few batch-sized vectors hot in L1 instead of n (chain16 had 27 registers of 4 KiB, past
    /// the L1). Values read after their range (`pinned` on entry) or from another range, and constants (filled
    /// once per task), keep theirs.
    fn registers(&mut self, k: &Kernel, range: &[usize], mut pinned: Vec<bool>) {
        let n = k.body.len();
        let mut last: Vec<Option<usize>> = vec![None; n];
        for q in 0..n {
            pinned[q] |= matches!(k.body[q], Instr::Scalar(_));
            for o in self.reads(k, q) {
                last[o] = Some(q);
                pinned[o] |= range[o] != range[q];
            }
        }
        let (mut free, mut count) = (Vec::new(), 0);
        for q in 0..n {
            // A constant is filled once per task and trusted while its first value and length match, so its
            // register is its own: one handed down from an earlier instruction would be overwritten by it in the
            // next batch, and a first value equal to the constant's would keep that batch's stale rest.
            let reuse = if matches!(k.body[q], Instr::Scalar(_)) { None } else { free.pop() };
            self.slot[q] = reuse.unwrap_or_else(|| {
                count += 1;
                count - 1
            });
            // Freed after `q` has its register, so an instruction never writes the register it reads.
            for o in self.reads(k, q) {
                if !pinned[o] && last[o] == Some(q) {
                    free.push(self.slot[o]);
                }
            }
            if !pinned[q] && last[q].is_none() {
                free.push(self.slot[q]);
            }
        }
        self.slots = count;
    }
}

/// Marks each float `op2(op1(x, y), s)` as a [`Step::Pair`] and each f32 `u(op1(x, y))` as a [`Step::Mapped`],
/// where the inner `op1` has no other reader and is no value read after its range.
fn pairs(k: &Kernel, scalar: &[Option<f32>], range: &[usize], after: &[bool], step: &mut [Step]) {
    let n = k.body.len();
    let mut readers = vec![0usize; n];
    for instr in &k.body {
        for o in instr.operands() {
            readers[o] += 1;
        }
    }
    let float = |i: usize| k.types[i].class() == Class::Float;
    let f32_at = |i: usize| k.types[i] == DType::F32;
    // Instructions ascend, so `p < q` has its own step settled when `q` asks for it.
    for q in 0..n {
        let p = match k.body[q] {
            Instr::Binary(_, a, b) if scalar[a].is_none() && scalar[b].is_some() => a,
            Instr::Binary(_, a, b) if scalar[a].is_some() && scalar[b].is_none() => b,
            Instr::Unary(_, a) => a,
            _ => continue,
        };
        let Instr::Binary(op1, x, y) = k.body[p] else { continue };
        if !pairable(op1) || readers[p] != 1 || after[p] || range[p] != range[q] || step[p] != Step::Plain {
            continue;
        }
        let (cx, cy) = (scalar[x], scalar[y]);
        step[q] = match k.body[q] {
            Instr::Binary(op2, a, b) if pairable(op2) && float(q) && float(p) && cx.is_none() && cy.is_none() => {
                let scalar_left = a != p;
                let s = scalar[if scalar_left { a } else { b }].expect("a constant operand");
                Step::Pair { op1, x, y, op2, s, scalar_left }
            }
            Instr::Unary(u, _) if mappable(u) && f32_at(q) && f32_at(p) && (cx.is_none() || cy.is_none()) => {
                Step::Mapped { u, op1, x, y, cx, cy }
            }
            _ => continue,
        };
        step[p] = Step::Skip;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::graph::build::{bin, data, fold, scalar, un};
    use crate::graph::{Graph, NodeId, NodeOp};
    use crate::op::{ReduceOp, Tri, UnaryOp};
    use crate::schedule::{plan, Options};
    use crate::shape::Shape;
    use std::ops::Range;

    fn kernels(g: &Graph, out: NodeId) -> Vec<Kernel> {
        plan(g, &[out], &Options::TEST).kernels.to_vec()
    }

    /// Replays the kernel's ranges in the order the CPU backend evaluates them, tracking which instruction last
    /// wrote each register, and checks that every read (operands, and the values read after a range) finds its
    /// own instruction's values there.
    fn assert_registers_hold(k: &Kernel) {
        let plan = Plan::new(k);
        let (slot, count) = (&plan.slot, plan.slots);
        assert!(slot.iter().all(|&s| s < count));
        let ranges: Vec<(Range<usize>, Vec<usize>)> = match k.kind {
            Kind::Reduce(r) => vec![
                (0..r.prologue, vec![r.value]),
                (r.prologue..k.body.len(), k.outputs.iter().map(|o| o.1).collect()),
            ],
            Kind::Matmul(mm) => vec![
                (0..mm.a_end, vec![mm.a]),
                (mm.a_end..mm.b_end, vec![mm.b]),
                (mm.b_end..k.body.len(), k.outputs.iter().map(|o| o.1).collect()),
            ],
            Kind::Rows { .. } => k
                .phases
                .iter()
                .map(|p| match p {
                    Phase::Fold { body, value, .. } => (body.clone(), vec![*value]),
                    Phase::Map { body, outputs } => (body.clone(), outputs.iter().map(|&m| k.outputs[m].1).collect()),
                })
                .collect(),
            _ => vec![(0..k.body.len(), k.outputs.iter().map(|o| o.1).collect())],
        };
        // A constant keeps its register to itself: it is filled once per task, not per batch.
        for (q, instr) in k.body.iter().enumerate() {
            if matches!(instr, Instr::Scalar(_)) {
                let sharing: Vec<usize> = (0..k.body.len()).filter(|&o| o != q && slot[o] == slot[q]).collect();
                assert!(sharing.is_empty(), "constant {q} shares its register with {sharing:?}: {:?}", k.body);
            }
        }
        let mut owner = vec![usize::MAX; count];
        for (range, after) in ranges {
            for q in range {
                if matches!(plan.step[q], Step::Skip) {
                    continue;
                }
                for o in plan.reads(k, q) {
                    assert_eq!(owner[slot[o]], o, "instruction {q} reads {o}, clobbered: {:?}", k.body);
                }
                owner[slot[q]] = q;
            }
            for v in after {
                assert_eq!(owner[slot[v]], v, "value {v} read after its range, clobbered: {:?}", k.body);
                assert!(plan.vector_read[v], "value {v} read after its range is never computed: {:?}", k.body);
            }
        }
    }

    #[test]
    fn a_long_chain_reuses_a_few_registers() {
        let mut g = Graph::default();
        let (a, b, c) = (data(&mut g, &[4096]), data(&mut g, &[4096]), data(&mut g, &[4096]));
        let mut x = a;
        for _ in 0..8 {
            let s = scalar(&mut g, 1.01);
            x = bin(&mut g, BinaryOp::Add, x, b);
            x = bin(&mut g, BinaryOp::Mul, x, s);
            x = bin(&mut g, BinaryOp::Sub, x, c);
            x = un(&mut g, UnaryOp::Tanh, x);
        }
        let ks = kernels(&g, x);
        assert_eq!(ks.len(), 1);
        assert_registers_hold(&ks[0]);
        let scalars = ks[0].body.iter().filter(|i| matches!(i, Instr::Scalar(_))).count();
        let count = Plan::new(&ks[0]).slots;
        // 3 loads and the chain's value in flight, plus one register per constant.
        assert!(count <= scalars + 5, "{count} registers for {} instructions", ks[0].body.len());
    }

    #[test]
    fn a_constant_after_a_freed_register_gets_its_own() {
        // `(x > 0) as i32 + 1`: the comparison's register is free by the time the constant 1 is placed; sharing it
        // kept the comparison's values (whose first is also 1) in every batch after the first.
        let mut g = Graph::default();
        let x = data(&mut g, &[4096]);
        let zero = scalar(&mut g, 0.0);
        let s = Shape::from([4096]);
        let gt = g.add(NodeOp::Binary(BinaryOp::Gt, x, zero), s.clone(), DType::Bool);
        let as_int = g.add(NodeOp::Cast(gt), s.clone(), DType::I32);
        let one = g.add(NodeOp::Const(1), Shape::from([]), DType::I32);
        let y = g.add(NodeOp::Binary(BinaryOp::Add, as_int, one), s, DType::I32);
        let ks = kernels(&g, y);
        assert_eq!(ks.len(), 1);
        assert_registers_hold(&ks[0]);
    }

    #[test]
    fn a_binary_op_and_the_constant_op_after_it_run_as_one_pair() {
        // ((a + b) * 5) - c) / 2: two pairs; (a + b) read twice: no pair for it.
        let mut g = Graph::default();
        let (a, b, c) = (data(&mut g, &[100]), data(&mut g, &[100]), data(&mut g, &[100]));
        let (five, two) = (scalar(&mut g, 5.0), scalar(&mut g, 2.0));
        let x = bin(&mut g, BinaryOp::Add, a, b);
        let x = bin(&mut g, BinaryOp::Mul, x, five);
        let x = bin(&mut g, BinaryOp::Sub, x, c);
        let chain3 = bin(&mut g, BinaryOp::Div, two, x);
        let k = &kernels(&g, chain3)[0];
        let plan = Plan::new(k);
        let pairs: Vec<(BinaryOp, BinaryOp, bool)> = plan
            .step
            .iter()
            .filter_map(|s| match *s {
                Step::Pair { op1, op2, scalar_left, .. } => Some((op1, op2, scalar_left)),
                _ => None,
            })
            .collect();
        assert_eq!(pairs, [(BinaryOp::Add, BinaryOp::Mul, false), (BinaryOp::Sub, BinaryOp::Div, true)]);
        assert_eq!(plan.step.iter().filter(|s| **s == Step::Skip).count(), 2);
        assert_registers_hold(k);

        let mut g = Graph::default();
        let (a, b) = (data(&mut g, &[100]), data(&mut g, &[100]));
        let five = scalar(&mut g, 5.0);
        let sum = bin(&mut g, BinaryOp::Add, a, b);
        let scaled = bin(&mut g, BinaryOp::Mul, sum, five);
        let both = bin(&mut g, BinaryOp::Add, scaled, sum);
        let k = &kernels(&g, both)[0];
        assert!(Plan::new(k).step.iter().all(|s| *s == Step::Plain), "a shared value is computed on its own");
    }

    #[test]
    fn an_activation_runs_with_the_op_before_it() {
        // sqrt(exp(a * 0.1) + b): both unary ops absorb the binary op before them.
        let mut g = Graph::default();
        let (a, b) = (data(&mut g, &[100]), data(&mut g, &[100]));
        let tenth = scalar(&mut g, 0.1);
        let x = bin(&mut g, BinaryOp::Mul, a, tenth);
        let x = un(&mut g, UnaryOp::Exp, x);
        let x = bin(&mut g, BinaryOp::Add, x, b);
        let x = un(&mut g, UnaryOp::Sqrt, x);
        let k = &kernels(&g, x)[0];
        let plan = Plan::new(k);
        let mapped: Vec<(UnaryOp, BinaryOp, bool, bool)> = plan
            .step
            .iter()
            .filter_map(|s| match *s {
                Step::Mapped { u, op1, cx, cy, .. } => Some((u, op1, cx.is_some(), cy.is_some())),
                _ => None,
            })
            .collect();
        assert_eq!(mapped, [(UnaryOp::Exp, BinaryOp::Mul, false, true), (UnaryOp::Sqrt, BinaryOp::Add, false, false)]);
        assert_registers_hold(k);
    }

    #[test]
    fn registers_hold_in_reduce_and_rows_kernels() {
        // Softmax (a rows kernel: max, sum, map), a sum of products with an epilogue (a reduce kernel), and a
        // column sum read back twice (values pinned across ranges).
        let mut g = Graph::default();
        let x = data(&mut g, &[64, 300]);
        let m = fold(&mut g, ReduceOp::Max, x, 1);
        let d = bin(&mut g, BinaryOp::Sub, x, m);
        let e = un(&mut g, UnaryOp::Exp, d);
        let s = fold(&mut g, ReduceOp::Sum, e, 1);
        let softmax = bin(&mut g, BinaryOp::Div, e, s);
        let y = data(&mut g, &[64, 300]);
        let p = bin(&mut g, BinaryOp::Mul, x, y);
        let q = un(&mut g, UnaryOp::Sqrt, p);
        let cols = fold(&mut g, ReduceOp::Sum, q, 0);
        let half = scalar(&mut g, 0.5);
        let scaled = bin(&mut g, BinaryOp::Mul, cols, half);
        let both = un(&mut g, UnaryOp::Exp, scaled);
        // A product of a constant and an expression, with an epilogue.
        let ones = g.add(NodeOp::Const(1f32.to_bits()), Shape::from([5, 300]), DType::F32);
        let tv = crate::view::View::contiguous(&Shape::from([64, 300])).permute(&[1, 0]);
        let t = g.add(NodeOp::View(tv, y), Shape::from([300, 64]), DType::F32);
        let t = un(&mut g, UnaryOp::Exp, t);
        let prod = g.add(NodeOp::Matmul(ones, t, Tri::Full), Shape::from([5, 64]), DType::F32);
        let relu = un(&mut g, UnaryOp::Relu, prod);
        let mut kinds = Vec::new();
        for out in [softmax, both, relu] {
            for k in kernels(&g, out) {
                kinds.push(std::mem::discriminant(&k.kind));
                assert_registers_hold(&k);
            }
        }
        assert!(kinds.len() >= 3);
    }
}
