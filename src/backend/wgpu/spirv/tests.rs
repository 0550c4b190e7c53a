//! The SPIR-V path without a GPU: naga's module for lazor's kernels, the layout derived from it, and the edits.

use super::patch::opcodes;
use super::*;
use crate::backend::wgpu::codegen::{generate, validate, Target};
use crate::dtype::DType;
use crate::graph::{Graph, NodeOp};
use crate::kernel::{Kernel, Kind};
use crate::op::{Tri, UnaryOp};
use crate::schedule::{plan, Options};
use crate::shape::Shape;

/// The one kernel of `act(a b)` for `[m, k]` and `[k, n]` operands of `dt` (no epilogue where `act` is `None`).
fn product(dt: DType, m: usize, k: usize, n: usize, act: Option<UnaryOp>) -> Kernel {
    let mut g = Graph::default();
    let a = g.add(NodeOp::Data(vec![0; m * k * 2]), Shape::from([m, k]), dt);
    let b = g.add(NodeOp::Data(vec![0; k * n * 2]), Shape::from([k, n]), dt);
    let mut out = g.add(NodeOp::Matmul(a, b, Tri::Full), Shape::from([m, n]), dt);
    if let Some(act) = act {
        out = g.add(NodeOp::Unary(act, out), Shape::from([m, n]), dt);
    }
    let kernels = plan(&g, &[out], &Options::TEST).kernels;
    assert_eq!(kernels.len(), 1);
    kernels[0].clone()
}

const CORES: Target = Target {
    subgroups: true,
    f16: true,
    coop: true,
    bf16_coop: true,
    int64: false,
    coop_triangles: false,
    coop_slab: 2,
};

#[test]
fn bf16_products_take_the_tensor_core_kernel_only_on_the_spirv_path() {
    let k = product(DType::BF16, 256, 128, 256, None);
    let Kind::Matmul(mm) = k.kind else { panic!("a product") };
    assert!(crate::backend::wgpu::codegen::uses_coop(&k, &mm, &CORES));
    assert!(!crate::backend::wgpu::codegen::uses_coop(&k, &mm, &Target { bf16_coop: false, ..CORES }));
    let edits = crate::backend::wgpu::codegen::edits(std::slice::from_ref(&k), &CORES, Mode::Hot);
    assert_eq!(
        edits,
        Some(Edits { bf16: true, ..Edits::default() }),
        "a bf16 tensor-core product must go through SPIR-V"
    );
    // Even with the path "off" in mode: its source means nothing as WGSL.
    let off = crate::backend::wgpu::codegen::edits(std::slice::from_ref(&k), &CORES, Mode::Off);
    assert_eq!(off, Some(Edits { bf16: true, ..Edits::default() }));
    // A bf16 product with an f16 anywhere in its kernel stays tiled: the edit would retype that f16 too.
    let mut g = Graph::default();
    let a = g.add(NodeOp::Data(vec![0; 256 * 128 * 2]), Shape::from([256, 128]), DType::BF16);
    let b = g.add(NodeOp::Data(vec![0; 128 * 256 * 2]), Shape::from([128, 256]), DType::BF16);
    let p = g.add(NodeOp::Matmul(a, b, Tri::Full), Shape::from([256, 256]), DType::BF16);
    let h = g.add(NodeOp::Cast(p), Shape::from([256, 256]), DType::F16);
    let mixed = plan(&g, &[h], &Options::TEST).kernels[0].clone();
    let Kind::Matmul(mm) = mixed.kind else { panic!("a product") };
    assert!(!crate::backend::wgpu::codegen::uses_coop(&mixed, &mm, &CORES), "an f16 output keeps it tiled");
}

#[test]
fn the_bf16_edit_retypes_the_half_float_and_declares_the_extension() {
    for (act, coop_slab) in [(None, 1), (Some(UnaryOp::Relu), 2), (None, 4)] {
        let k = product(DType::BF16, 200, 72, 100, act);
        let src = generate(&k, &Target { coop_slab, ..CORES });
        validate(&src);
        assert!(src.contains("vec2<f16>(unpack2x16float(x))"), "{src}");
        let m = compile(&src, Edits { bf16: true, ..Edits::default() }, (1, 6), true).expect("compiles");
        let ops = opcodes(&m.words);
        let halves: Vec<_> = ops.iter().filter(|(o, w)| *o == 22 && w[1] == 16).collect();
        assert_eq!(halves.len(), 1, "one 16-bit float type");
        assert_eq!(halves[0].1.len(), 3, "with its encoding operand: {:?}", halves[0]);
        assert_eq!(halves[0].1[2], 0, "BFloat16KHR");
        let caps: Vec<u32> = ops.iter().filter(|(o, _)| *o == 17).map(|(_, w)| w[0]).collect();
        assert!(caps.contains(&5116) && caps.contains(&5118), "{caps:?}");
        let first_ext = ops.iter().position(|(o, _)| *o == 10).expect("an extension");
        let last_cap = ops.iter().rposition(|(o, _)| *o == 17).unwrap();
        assert!(last_cap < first_ext, "capabilities before extensions");
        assert!(ops.iter().any(|(o, _)| *o == 4459), "cooperative multiply-adds");
        // The slabs take each word's bits as a pair of bf16 values.
        assert_pairs_are_bits(&ops, halves[0].1[0]);
    }
}

/// A bitcast of a word to a pair of `half` (type id), and no unpacked pair converted.
fn assert_pairs_are_bits(ops: &[(u16, Vec<u32>)], half: u32) {
    let unpacked: Vec<u32> = ops.iter().filter(|(o, w)| *o == 12 && w[3] == 62).map(|(_, w)| w[1]).collect();
    assert!(!unpacked.is_empty(), "the slab stores unpack words");
    assert!(!ops.iter().any(|(o, w)| *o == 115 && unpacked.contains(&w[2])), "an unpacked pair converted");
    let pair = ops.iter().find(|(o, w)| *o == 23 && w[1] == half && w[2] == 2).expect("a pair type");
    assert!(ops.iter().any(|(o, w)| *o == 124 && w[0] == pair.1[0]), "words bitcast to pairs");
}

#[test]
fn f16_tensor_core_products_take_the_spirv_path_to_stage_words_as_they_are() {
    use crate::backend::wgpu::codegen::edits;
    let k = product(DType::F16, 256, 64, 128, Some(UnaryOp::Relu));
    let hot = edits(std::slice::from_ref(&k), &CORES, Mode::Hot);
    assert_eq!(hot, Some(Edits { bits: true, ..Edits::default() }));
    assert_eq!(edits(std::slice::from_ref(&k), &CORES, Mode::All), hot);
    assert_eq!(edits(std::slice::from_ref(&k), &CORES, Mode::Off), None, "LAZOR_SPIRV=0: WGSL's");
    let tiled = Target { coop: false, ..CORES };
    assert_eq!(edits(std::slice::from_ref(&k), &tiled, Mode::Hot), None, "tiled f16 products stay WGSL's");
    let m = compile(&generate(&k, &CORES), hot.unwrap(), (1, 6), true).expect("compiles");
    let ops = opcodes(&m.words);
    let half = ops.iter().find(|(o, w)| *o == 22 && w[1] == 16).expect("f16").1[0];
    assert_pairs_are_bits(&ops, half);
    // Odd sizes check each octet and unpack its words to pick halves: the edit leaves those reads alone.
    let odd = product(DType::F16, 200, 72, 100, None);
    let src = generate(&odd, &CORES);
    assert!(src.contains("let pair = unpack2x16float("), "a checked octet");
    compile(&src, Edits { bits: true, ..Edits::default() }, (1, 6), true).expect("not refused");
}

#[test]
fn the_bf16_edit_refuses_a_module_that_computes_in_f16() {
    let src = "enable f16;\n@group(0) @binding(0) var<storage, read_write> a: array<f32>;\n\
               @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {\n\
               let h = f16(a[g.x]) * f16(3.0);\n    a[g.x] = f32(h);\n}";
    assert!(compile(src, Edits::default(), (1, 6), false).is_ok());
    let err = compile(src, Edits { bf16: true, ..Edits::default() }, (1, 6), false).err().expect("refused");
    assert!(err.contains("16-bit float"), "{err}");
}

#[test]
fn exact_kernels_decorate_every_float_operation_no_contraction() {
    let mut g = Graph::default();
    let x = g.add(NodeOp::Data(vec![0; 4096]), Shape::from([1024]), DType::F32);
    let y = g.add(NodeOp::Unary(UnaryOp::Exp, x), Shape::from([1024]), DType::F32);
    let z = g.add(NodeOp::Binary(crate::op::BinaryOp::Mul, y, x), Shape::from([1024]), DType::F32);
    let w = g.add(NodeOp::Binary(crate::op::BinaryOp::Add, z, x), Shape::from([1024]), DType::F32);
    let k = plan(&g, &[w], &Options::TEST).kernels[0].clone();
    let src = generate(&k, &Target::default());
    let plain = compile(&src, Edits::default(), (1, 3), false).unwrap();
    let exact = compile(&src, Edits { exact: true, ..Edits::default() }, (1, 3), false).unwrap();
    let arithmetic: Vec<u32> =
        opcodes(&plain.words).iter().filter(|(o, _)| [129, 133, 142].contains(o)).map(|(_, w)| w[1]).collect();
    assert!(!arithmetic.is_empty());
    let ops = opcodes(&exact.words);
    let decorated: Vec<u32> = ops.iter().filter(|(o, w)| *o == 71 && w[1] == 42).map(|(_, w)| w[0]).collect();
    for id in &arithmetic {
        assert!(decorated.contains(id), "%{id} not NoContraction");
    }
    assert!(!opcodes(&plain.words).iter().any(|(o, w)| *o == 71 && w[1] == 42));
    // Decorations sit before the first type declaration.
    let first_type = ops.iter().position(|(o, _)| (19..=39).contains(o)).unwrap();
    assert!(ops.iter().rposition(|(o, _)| *o == 71).unwrap() < first_type);
}

#[test]
fn the_layout_is_group_0_dense_from_0_with_each_bindings_access() {
    let k = product(DType::F32, 64, 64, 64, Some(UnaryOp::Relu));
    let src = generate(&k, &Target::default());
    let m = compile(&src, Edits::default(), (1, 3), true).unwrap();
    let bindings: Vec<u32> = m.entries.iter().map(|e| e.binding).collect();
    assert_eq!(bindings, (0..bindings.len() as u32).collect::<Vec<_>>());
    assert!(bindings.len() >= 4, "parameters, an output, two inputs: {bindings:?}");
    let ty = |i: usize| match m.entries[i].ty {
        wgpu::BindingType::Buffer { ty, .. } => ty,
        other => panic!("{other:?}"),
    };
    assert_eq!(ty(0), wgpu::BufferBindingType::Uniform, "parameters");
    assert_eq!(ty(1), wgpu::BufferBindingType::Storage { read_only: false }, "the output");
    assert_eq!(ty(2), wgpu::BufferBindingType::Storage { read_only: true }, "an input");
    assert_eq!(m.workgroup[0] * m.workgroup[1] * m.workgroup[2], 256);
}

#[test]
fn a_module_with_a_gap_in_its_bindings_is_refused() {
    let src = "@group(0) @binding(0) var<storage, read_write> a: array<f32>;\n\
               @group(0) @binding(2) var<storage, read> b: array<f32>;\n\
               @compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) { a[g.x] = b[g.x]; }";
    let err = compile(src, Edits::default(), (1, 3), false).err().expect("refused");
    assert!(err.contains("densely"), "{err}");
}

#[test]
fn a_non_module_is_refused_by_the_edits() {
    assert!(patch::bf16(&[1, 2, 3]).is_err());
    assert!(patch::no_contraction(&[0x0723_0203, 0, 0, 0, 0]).is_ok(), "an empty module has nothing to decorate");
}
