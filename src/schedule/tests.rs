//! The scheduler's unit tests, without a GPU: plans of small graphs (fusion, kernel counts, layouts, buffers).

use super::*;
use crate::dtype::DType;
use crate::graph::build::{bin, data, fold, scalar, un};
use crate::kernel::Instr;
use crate::op::{BinaryOp, Tri, UnaryOp};
use crate::shape::Shape;
use crate::view::View;

const FUSE: Options = Options::TEST;
const NOFUSE: Options = Options { fuse: false, ..Options::TEST };

/// `((a + b) * 5.0 - c) / 2.0`
fn chain3(g: &mut Graph, n: usize) -> NodeId {
    let (a, b, c) = (data(g, &[n]), data(g, &[n]), data(g, &[n]));
    let s5 = scalar(g, 5.0);
    let s2 = scalar(g, 2.0);
    let x = bin(g, BinaryOp::Add, a, b);
    let x = bin(g, BinaryOp::Mul, x, s5);
    let x = bin(g, BinaryOp::Sub, x, c);
    bin(g, BinaryOp::Div, x, s2)
}

#[test]
fn chain_fuses_into_one_kernel() {
    let mut g = Graph::default();
    let out = chain3(&mut g, 1000);
    let p = plan(&g, &[out], &FUSE);
    assert_eq!(p.kernels.len(), 1);
    let k = &p.kernels[0];
    assert_eq!(k.inputs.len(), 3);
    assert_eq!(k.outputs.len(), 1);
    assert_eq!(k.fused_ops, 4);
    let scalars: Vec<f32> = k
        .body
        .iter()
        .filter_map(|i| match i {
            Instr::Scalar(at) => Some(f32::from_bits(k.params[*at])),
            _ => None,
        })
        .collect();
    assert_eq!(scalars, vec![5.0, 2.0]);
    assert!(k.dims_at.is_none(), "same-shape inputs are read at the kernel's own index");
    assert_eq!(k.width, 4, "so it runs on vec4");
    assert!(crate::backend::wgpu::codegen::generate(k, &Default::default()).contains("array<vec4<f32>>"));
    assert_eq!(p.slots.iter().filter(|s| s.source == Source::Upload).count(), 3);
}

#[test]
fn nofuse_is_one_kernel_per_op_and_ping_pongs() {
    let mut g = Graph::default();
    let mut x = data(&mut g, &[64]);
    let one = scalar(&mut g, 1.0);
    for _ in 0..100 {
        x = bin(&mut g, BinaryOp::Add, x, one);
    }
    let p = plan(&g, &[x], &NOFUSE);
    assert_eq!(p.kernels.len(), 100);
    // Each intermediate dies right after the kernel that reads it.
    for (k, frees) in p.frees.iter().enumerate() {
        let expect = if k == 0 { 0 } else { 1 };
        assert_eq!(frees.len(), expect, "kernel {k}");
        if k > 0 {
            assert_eq!(frees[0], p.kernels[k - 1].outputs[0].0);
            assert_eq!(p.slots[frees[0]].source, Source::Kernel);
        }
    }
}

#[test]
fn broadcast_input_is_strided() {
    let mut g = Graph::default();
    let a = data(&mut g, &[2, 3]);
    let b = data(&mut g, &[3]);
    let c = bin(&mut g, BinaryOp::Add, a, b);
    let p = plan(&g, &[c], &FUSE);
    let k = &p.kernels[0];
    assert_eq!(k.dims_at, Some(1));
    // numel, dims [2, 3], then b's view: strides [0, 1] and offset 0.
    assert_eq!(k.params, vec![6, 2, 3, 0, 1, 0]);
    assert_eq!(k.width, 1, "small strided kernels run one element per thread");
}

#[test]
fn shared_subexpression_is_computed_once_for_two_outputs() {
    let mut g = Graph::default();
    let a = data(&mut g, &[8]);
    let e = g.add(NodeOp::Unary(UnaryOp::Exp, a), Shape::from([8]), DType::F32);
    let x = bin(&mut g, BinaryOp::Add, e, a);
    let y = bin(&mut g, BinaryOp::Mul, e, a);
    let p = plan(&g, &[x, y], &FUSE);
    assert_eq!(p.kernels.len(), 1);
    let k = &p.kernels[0];
    assert_eq!(k.outputs.len(), 2);
    assert_eq!(k.fused_ops, 3, "exp once, add, mul");
    assert_eq!(k.inputs.len(), 1);
}

#[test]
fn too_many_buffers_split_the_kernel() {
    let mut g = Graph::default();
    let mut x = data(&mut g, &[16]);
    for _ in 0..20 {
        let d = data(&mut g, &[16]);
        x = bin(&mut g, BinaryOp::Add, x, d);
    }
    let p = plan(&g, &[x], &FUSE);
    assert!(p.kernels.len() > 1);
    for k in p.kernels.iter() {
        assert!(k.bindings() <= 8, "{} bindings", k.bindings());
    }
    let total: usize = p.kernels.iter().map(|k| k.fused_ops).sum();
    assert_eq!(total, 20, "nothing is computed twice");
}

#[test]
fn outputs_of_different_shapes_load_each_other() {
    let mut g = Graph::default();
    let a = data(&mut g, &[3]);
    let small = g.add(NodeOp::Unary(UnaryOp::Exp, a), Shape::from([3]), DType::F32);
    let big_in = data(&mut g, &[4, 3]);
    let big = bin(&mut g, BinaryOp::Mul, big_in, small);
    let p = plan(&g, &[big, small], &FUSE);
    assert_eq!(p.kernels.len(), 2);
    let small_slot = p.slot_of(small).unwrap();
    assert_eq!(p.kernels[0].outputs[0].0, small_slot);
    assert!(p.kernels[1].inputs.iter().any(|i| i.0 == small_slot));
    assert!(p.frees.iter().all(|f| f.is_empty()), "requested outputs are never freed");
}

#[test]
fn long_chains_split_into_equal_kernels() {
    let mut g = Graph::default();
    let mut x = data(&mut g, &[4]);
    for i in 0..1000 {
        let c = scalar(&mut g, i as f32);
        x = bin(&mut g, BinaryOp::Add, x, c);
    }
    let p = plan(&g, &[x], &FUSE);
    assert_eq!(p.kernels.len(), 4);
    assert!(p.kernels.iter().all(|k| k.fused_ops <= 256));
    assert_eq!(p.kernels.iter().map(|k| k.fused_ops).sum::<usize>(), 1000);
    let src: Vec<String> =
        p.kernels.iter().map(|k| crate::backend::wgpu::codegen::generate(k, &Default::default())).collect();
    assert_eq!(src[1], src[2], "equal chunks share one pipeline");
}

#[test]
fn kernels_of_one_structure_share_a_pipeline_key() {
    let mut g = Graph::default();
    let small = chain3(&mut g, 1000);
    let big = chain3(&mut g, 100_000);
    let t = crate::backend::wgpu::codegen::Target::default();
    let (p1, p2) = (plan(&g, &[small], &FUSE), plan(&g, &[big], &FUSE));
    let (k1, k2) = (&p1.kernels[0], &p2.kernels[0]);
    assert_ne!(k1.params, k2.params);
    assert_eq!(crate::backend::wgpu::codegen::Key::of(k1, &t), crate::backend::wgpu::codegen::Key::of(k2, &t));
    assert_eq!(crate::backend::wgpu::codegen::generate(k1, &t), crate::backend::wgpu::codegen::generate(k2, &t));
    let e = g.add(NodeOp::Unary(UnaryOp::Exp, big), Shape::from([100_000]), DType::F32);
    let p3 = plan(&g, &[e], &FUSE);
    assert_ne!(
        crate::backend::wgpu::codegen::Key::of(&p3.kernels[0], &t),
        crate::backend::wgpu::codegen::Key::of(k2, &t)
    );
}

/// `x [m, k] @ w [k, n]`, with `x` first put through `pre` and the product through `post`.
fn matmul(g: &mut Graph, m: usize, k: usize, n: usize) -> (NodeId, NodeId, NodeId) {
    let x = data(g, &[m, k]);
    let w = data(g, &[k, n]);
    let p = g.add(NodeOp::Matmul(x, w, Tri::Full), Shape::from([m, n]), DType::F32);
    (x, w, p)
}

#[test]
fn f32_products_of_whole_column_quads_store_16_byte_vectors() {
    use crate::kernel::Kind;
    let quad_of = |g: &Graph, outs: &[NodeId]| -> (bool, String) {
        let p = plan(g, outs, &FUSE);
        let k = &p.kernels[0];
        let Kind::Matmul(mm) = k.kind else { panic!("a product first") };
        let src = crate::backend::wgpu::codegen::generate(k, &Default::default());
        crate::backend::wgpu::codegen::validate(&src);
        (mm.quad, src)
    };
    // n a multiple of 4, the product and its epilogue both stored: each output bound and written as vectors.
    let mut g = Graph::default();
    let (_, _, p) = matmul(&mut g, 70, 30, 132);
    let bias = data(&mut g, &[132]);
    let y = bin(&mut g, BinaryOp::Add, p, bias);
    let (quad, src) = quad_of(&g, &[p, y]);
    assert!(quad);
    assert!(src.contains("o0: array<vec4<f32>>") && src.contains("o1: array<vec4<f32>>"), "{src}");
    assert!(src.contains("o1[i >> 2u] = vec4<f32>(w0[1], w1[1], w2[1], w3[1]);"), "{src}");
    // n = 2 mod 4: a thread's 4 columns may straddle n, so element by element.
    let mut g = Graph::default();
    let (_, _, p) = matmul(&mut g, 70, 30, 130);
    let (quad, src) = quad_of(&g, &[p]);
    assert!(!quad && src.contains("o0: array<f32>"), "{src}");
    // An output that is not f32 (a mask of the product): element by element.
    let mut g = Graph::default();
    let (_, _, p) = matmul(&mut g, 70, 30, 132);
    let zero = scalar(&mut g, 0.0);
    let mask = g.add(NodeOp::Binary(BinaryOp::Gt, p, zero), Shape::from([70, 132]), DType::Bool);
    assert!(!quad_of(&g, &[p, mask]).0);
    // 8 x 8 outputs per thread (the large tile: 2048^2 outputs make 256 of them) only up to QUAD_MAX_K, but the
    // deep large tile (both operands fetched as quads, k a multiple of 16) and the small tile at any k.
    for (m, k, quad) in [(2048, 384, true), (2048, 388, false), (2048, 512, true), (70, 3000, true)] {
        let mut g = Graph::default();
        let (_, _, p) = matmul(&mut g, m, k, m.max(132));
        let tile = plan(&g, &[p], &FUSE).kernels[0].kind;
        let Kind::Matmul(mm) = tile else { panic!("a product") };
        assert_eq!((mm.tile.tm * mm.tile.tn == 64, mm.quad), (m == 2048, quad), "{m} x {k}");
        // Only the 2048-square products with k a multiple of 16 are covered by their tiles exactly (and fetch
        // without bounds checks).
        assert_eq!(mm.even, m == 2048 && k % 16 == 0, "{m} x {k}");
        // Plain f32 operands of an even product are fetched 16 bytes at a time, and then on the deep large tile.
        assert_eq!((mm.vec_a, mm.vec_b), (mm.even, mm.even), "{m} x {k}");
        assert_eq!(mm.tile == crate::kernel::MatmulTiles::TUNED.deep, m == 2048 && mm.even, "{m} x {k}");
    }
}

/// Every blocking `LAZOR_MATMUL_TILE` accepts gives valid WGSL on each fetch path: even or not, operands by quads
/// or element by element, read along k or across it (the skeleton's unused path must still compile: a 64 x 64
/// tile 4 steps deep stages one element a thread, too few for a quad).
#[test]
fn every_blocking_compiles_on_every_fetch_path() {
    use crate::kernel::{Kind, MatmulTile};
    for (tm, tn) in [(4, 4), (4, 8), (8, 4), (8, 8)] {
        for bk in [4, 8, 16, 32] {
            let tile = MatmulTile { bm: 16 * tm, bn: 16 * tn, bk, tm, tn };
            for (m, k, n) in [(256, 256, 256), (250, 250, 250)] {
                for transposed in [false, true] {
                    let mut g = Graph::default();
                    let (x, w, p) = matmul(&mut g, m, k, n);
                    let out = if transposed {
                        let xt = g.add(
                            NodeOp::View(View::contiguous(&Shape::from([m, k])).permute(&[1, 0]), x),
                            Shape::from([k, m]),
                            DType::F32,
                        );
                        let wt = g.add(
                            NodeOp::View(View::contiguous(&Shape::from([k, n])).permute(&[1, 0]), w),
                            Shape::from([n, k]),
                            DType::F32,
                        );
                        g.add(NodeOp::Matmul(wt, xt, Tri::Full), Shape::from([n, m]), DType::F32)
                    } else {
                        p
                    };
                    let plan = plan(&g, &[out], &Options { matmul_tile: Some(tile), ..FUSE });
                    let k0 = &plan.kernels[0];
                    let Kind::Matmul(mm) = k0.kind else { panic!("a product") };
                    let quads = m == 256 && (tile.bm * bk) % 1024 == 0 && (tile.bn * bk) % 1024 == 0;
                    assert_eq!((mm.even, mm.vec_a && mm.vec_b), (m == 256, quads), "{tile:?} {m}");
                    crate::backend::wgpu::codegen::validate(&crate::backend::wgpu::codegen::generate(
                        k0,
                        &Default::default(),
                    ));
                }
            }
        }
    }
}

#[test]
fn operands_of_even_products_are_fetched_as_aligned_quads() {
    use crate::kernel::Kind;
    let flags = |g: &Graph, out: NodeId| {
        let p = plan(g, &[out], &FUSE);
        let k = &p.kernels[0];
        let Kind::Matmul(mm) = k.kind else { panic!("a product first") };
        crate::backend::wgpu::codegen::validate(&crate::backend::wgpu::codegen::generate(k, &Default::default()));
        (mm.vec_a, mm.vec_b, k.inputs.iter().map(|i| i.1).collect::<Vec<_>>())
    };
    let view = |g: &mut Graph, x: NodeId, v: View| {
        let shape = v.shape.clone();
        g.add(NodeOp::View(v, x), shape, DType::F32)
    };
    // `x x^T`: both operands read one buffer (as q and k of an attention), both as quads, bound once as vectors.
    let mut g = Graph::default();
    let x = data(&mut g, &[2048, 64]);
    let xt = view(&mut g, x, View::contiguous(&Shape::from([2048, 64])).permute(&[1, 0]));
    let p = g.add(NodeOp::Matmul(x, xt, Tri::Full), Shape::from([2048, 2048]), DType::F32);
    assert_eq!(flags(&g, p), (true, true, vec![true]));
    // A starts one element into its buffer: its quads would not be 16-byte aligned, so A goes element by element
    // and B, another buffer, still by quads.
    let mut g = Graph::default();
    let x = data(&mut g, &[2048 * 64 + 1]);
    let mut v = View::contiguous(&Shape::from([2048, 64]));
    v.offset = 1;
    let a = view(&mut g, x, v);
    let w = data(&mut g, &[64, 2048]);
    let p = g.add(NodeOp::Matmul(a, w, Tri::Full), Shape::from([2048, 2048]), DType::F32);
    assert_eq!(flags(&g, p), (false, true, vec![false, true]));
    let Kind::Matmul(mm) = plan(&g, &[p], &FUSE).kernels[0].kind else { panic!("a product") };
    assert_eq!(mm.tile, crate::kernel::MatmulTiles::TUNED.large, "one operand by quads: the 8-deep large tile");
    // An operand with a prologue (relu of A) is computed element by element.
    let mut g = Graph::default();
    let (x, w, _) = matmul(&mut g, 2048, 64, 2048);
    let rx = un(&mut g, UnaryOp::Relu, x);
    let p = g.add(NodeOp::Matmul(rx, w, Tri::Full), Shape::from([2048, 2048]), DType::F32);
    assert_eq!(flags(&g, p), (false, true, vec![false, true]));
}

#[test]
fn f16_operands_are_whole_octets_only_where_every_octet_is_aligned() {
    use crate::kernel::Kind;
    // A of an f16 product starting `offset` halves into its buffer; B plain.
    let octets = |offset: usize, k: usize| {
        let mut g = Graph::default();
        let x =
            g.add(NodeOp::Data(vec![0; (1024 * k + offset).div_ceil(2)]), Shape::from([1024 * k + offset]), DType::F16);
        let mut v = View::contiguous(&Shape::from([1024, k]));
        v.offset = offset as isize;
        let a = g.add(NodeOp::View(v, x), Shape::from([1024, k]), DType::F16);
        let w = g.add(NodeOp::Data(vec![0; k * 512]), Shape::from([k, 1024]), DType::F16);
        let p = g.add(NodeOp::Matmul(a, w, Tri::Full), Shape::from([1024, 1024]), DType::F16);
        let Kind::Matmul(mm) = plan(&g, &[p], &FUSE).kernels[0].kind else { panic!("a product") };
        (mm.octets_a, mm.octets_b)
    };
    assert_eq!(octets(0, 256), (true, true));
    assert_eq!(octets(8, 256), (true, true));
    // 4 halves in: 8-byte aligned, so the f32 kernel's quads would be, but an octet is 16 bytes.
    assert_eq!(octets(4, 256), (false, true));
    // k not a multiple of the tensor-core slab depth (32): no octet is settled at plan time.
    assert_eq!(octets(0, 264), (false, false));
}

#[test]
fn bf16_operands_are_octets_and_casts_to_half_operands_are_stored_where_products_run_on_tensor_cores() {
    use crate::kernel::Kind;
    let mut g = Graph::default();
    let a = g.add(NodeOp::Data(vec![0; 1024 * 256 * 2]), Shape::from([1024, 256]), DType::BF16);
    let w = g.add(NodeOp::Data(vec![0; 256 * 1024 * 2]), Shape::from([256, 1024]), DType::BF16);
    let p = g.add(NodeOp::Matmul(a, w, Tri::Full), Shape::from([1024, 1024]), DType::BF16);
    let Kind::Matmul(mm) = plan(&g, &[p], &FUSE).kernels[0].kind else { panic!("a product") };
    assert_eq!((mm.octets_a, mm.octets_b), (true, true), "bf16 operands go to tensor cores 16 bytes at a time too");
    assert_eq!(mm.tile, crate::kernel::MatmulTiles::TUNED.wide, "the tensor cores' block");
    // Autocast's linear: an f32 activation and an f32 weight cast to bf16 where the product reads them.
    let mut g = Graph::default();
    let x = data(&mut g, &[1024, 256]);
    let wf = data(&mut g, &[1024, 256]);
    let x = g.add(NodeOp::Unary(UnaryOp::Relu, x), Shape::from([1024, 256]), DType::F32);
    let xc = g.add(NodeOp::Cast(x), Shape::from([1024, 256]), DType::BF16);
    let wc = g.add(NodeOp::Cast(wf), Shape::from([1024, 256]), DType::BF16);
    let v = View { shape: Shape::from([256, 1024]), strides: vec![1, 256].into(), offset: 0 };
    let wt = g.add(NodeOp::View(v, wc), Shape::from([256, 1024]), DType::BF16);
    let p = g.add(NodeOp::Matmul(xc, wt, Tri::Full), Shape::from([1024, 1024]), DType::BF16);
    // Fused into the product's tile loads where products are tiled (and on the CPU backend).
    let fused = plan(&g, &[p], &FUSE);
    assert_eq!(fused.kernels.len(), 1);
    // Stored where they run on tensor cores: the relu and its cast, and the weight's cast, by one kernel of two
    // outputs (the same shape), and the product fetches both as octets.
    let cores = plan(&g, &[p], &Options { half_operands: true, ..FUSE });
    let names: Vec<String> = cores.kernels.iter().map(|k| k.name()).collect();
    assert_eq!(cores.kernels.len(), 2, "{names:?}");
    assert_eq!(cores.kernels[0].outputs.len(), 2, "{names:?}");
    let Kind::Matmul(mm) = cores.kernels[1].kind else { panic!("the product last") };
    assert_eq!((mm.octets_a, mm.octets_b), (true, true));
}

#[test]
fn matmul_takes_its_epilogue_and_cheap_prologues() {
    let mut g = Graph::default();
    let (x, w, _) = matmul(&mut g, 64, 32, 48);
    let bias = data(&mut g, &[48]);
    let rx = g.add(NodeOp::Unary(UnaryOp::Relu, x), Shape::from([64, 32]), DType::F32);
    let p = g.add(NodeOp::Matmul(rx, w, Tri::Full), Shape::from([64, 48]), DType::F32);
    let y = bin(&mut g, BinaryOp::Add, p, bias);
    let y = g.add(NodeOp::Unary(UnaryOp::Gelu, y), Shape::from([64, 48]), DType::F32);
    let pl = plan(&g, &[y], &FUSE);
    assert_eq!(pl.kernels.len(), 1);
    let k = &pl.kernels[0];
    let crate::kernel::Kind::Matmul(mm) = k.kind else { panic!("{:?}", k.kind) };
    assert!(matches!(k.body[mm.a], Instr::Unary(UnaryOp::Relu, _)), "relu runs on A's loads");
    assert!(k.body[mm.b_end..].contains(&Instr::Reduced), "the epilogue reads the product");
    assert!(mm.a_along_k && !mm.b_along_k, "row-major A along k, row-major B along n");
    assert_eq!((k.inputs.len(), k.outputs.len()), (3, 1));
    // An expensive operand is stored first.
    let mut heavy = x;
    for op in [UnaryOp::Exp, UnaryOp::Sin, UnaryOp::Cos] {
        heavy = g.add(NodeOp::Unary(op, heavy), Shape::from([64, 32]), DType::F32);
    }
    let p = g.add(NodeOp::Matmul(heavy, w, Tri::Full), Shape::from([64, 48]), DType::F32);
    let pl = plan(&g, &[p], &FUSE);
    assert_eq!(pl.kernels.len(), 2);
    assert_eq!(pl.kernels[0].kind, crate::kernel::Kind::Elementwise);
}

#[test]
fn a_reshape_of_the_product_joins_its_epilogue() {
    // `conv2d`: a [2, 24, 36] product plus a bias along rows, seen as [2, 24, 6, 6], then an activation.
    let mut g = Graph::default();
    let w = data(&mut g, &[2, 24, 32]);
    let cols = data(&mut g, &[2, 32, 36]);
    let bias = data(&mut g, &[24, 1]);
    let p = g.add(NodeOp::Matmul(w, cols, Tri::Full), Shape::from([2, 24, 36]), DType::F32);
    let y = bin(&mut g, BinaryOp::Add, p, bias);
    let image = Shape::from([2, 24, 6, 6]);
    let v = g.add(NodeOp::View(View::contiguous(&image), y), image.clone(), DType::F32);
    let r = g.add(NodeOp::Unary(UnaryOp::Relu, v), image.clone(), DType::F32);
    let pl = plan(&g, &[r], &FUSE);
    assert_eq!(pl.kernels.len(), 1, "bias and relu in the product's epilogue");
    assert!(matches!(pl.kernels[0].kind, crate::kernel::Kind::Matmul(_)));
    // Read through anything but a reshape (a transpose of the image), it starts a kernel of its own.
    let t = View::contiguous(&image).permute(&[0, 1, 3, 2]);
    let vt = g.add(NodeOp::View(t, v), image.clone(), DType::F32);
    let rt = g.add(NodeOp::Unary(UnaryOp::Relu, vt), image, DType::F32);
    assert_eq!(plan(&g, &[rt], &FUSE).kernels.len(), 2);
}

#[test]
fn matrix_vector_products_are_folds() {
    let mut g = Graph::default();
    let (_, _, p) = matmul(&mut g, 1, 4096, 512);
    let pl = plan(&g, &[p], &FUSE);
    assert!(pl.kernels.iter().all(|k| matches!(k.kind, crate::kernel::Kind::Reduce(r) if !r.rows)), "k outer");
    // 64 chunks of k: their partial sums are folded by teams of threads per column.
    let teams: Vec<bool> =
        pl.kernels.iter().map(|k| matches!(k.kind, crate::kernel::Kind::Reduce(r) if r.column_team)).collect();
    assert_eq!(teams, [false, true]);
    assert_eq!(pl.kernels[1].threads(), 512 * 8);
    let (_, _, p) = matmul(&mut g, 512, 4096, 1);
    let pl = plan(&g, &[p], &FUSE);
    assert!(matches!(pl.kernels[0].kind, crate::kernel::Kind::Reduce(r) if r.rows), "k innermost");
}

#[test]
fn thin_products_with_enough_work_hold_the_narrow_side_in_registers() {
    use crate::kernel::{Kind, Thin};
    let thin_of = |g: &Graph, p: NodeId| -> Option<Thin> {
        let pl = plan(g, &[p], &FUSE);
        match pl.kernels[..] {
            [ref k] => match k.kind {
                Kind::Matmul(mm) => mm.thin,
                _ => None,
            },
            _ => {
                assert!(pl.kernels.iter().all(|k| matches!(k.kind, Kind::Reduce(_))), "a fold in two stages");
                None
            }
        }
    };
    let t = |g: &mut Graph, x: NodeId| {
        let d = g.node(x).shape.dims().to_vec();
        let v = View::contiguous(&Shape::from(d.clone())).permute(&[1, 0]);
        g.add(NodeOp::View(v, x), Shape::from([d[1], d[0]]), DType::F32)
    };
    let mut g = Graph::default();
    // An MLP's 10-class output layer, batch 4096: the forward `h @ w^T` and the weight gradient `g^T @ h`.
    let h = data(&mut g, &[4096, 1024]);
    let w = data(&mut g, &[10, 1024]);
    let grad = data(&mut g, &[4096, 10]);
    let (wt, gt) = (t(&mut g, w), t(&mut g, grad));
    let fwd = g.add(NodeOp::Matmul(h, wt, Tri::Full), Shape::from([4096, 10]), DType::F32);
    assert_eq!(thin_of(&g, fwd), Some(Thin { columns: true, team: true, narrow: 10 }), "A's rows walked by teams");
    let dw = g.add(NodeOp::Matmul(gt, h, Tri::Full), Shape::from([10, 1024]), DType::F32);
    assert_eq!(thin_of(&g, dw), None, "4 workgroups of columns: a fold (the API cuts k first)");
    // Cut into 64 slices of k, as `Tensor::matmul` does: B's columns walked by a thread each.
    let g3 = {
        let v = View::contiguous(&Shape::from([10, 64, 64])).permute(&[1, 0, 2]);
        let flat = g.add(
            NodeOp::View(View::contiguous(&Shape::from([10, 64, 64])), gt),
            Shape::from([10, 64, 64]),
            DType::F32,
        );
        g.add(NodeOp::View(v, flat), Shape::from([64, 10, 64]), DType::F32)
    };
    let h3 =
        g.add(NodeOp::View(View::contiguous(&Shape::from([64, 64, 1024])), h), Shape::from([64, 64, 1024]), DType::F32);
    let dw3 = g.add(NodeOp::Matmul(g3, h3, Tri::Full), Shape::from([64, 10, 1024]), DType::F32);
    assert_eq!(thin_of(&g, dw3), Some(Thin { columns: false, team: false, narrow: 10 }));
    // The input gradient's transpose, `h^T @ g`, and a product whose wide operand is contiguous along k.
    let ht = t(&mut g, h);
    let g64 = data(&mut g, &[4096, 16]);
    let dh = g.add(NodeOp::Matmul(ht, g64, Tri::Full), Shape::from([1024, 16]), DType::F32);
    assert_eq!(thin_of(&g, dh), None, "4 workgroups");
    let big = data(&mut g, &[8192, 4096]);
    let bigt = t(&mut g, big);
    let few = data(&mut g, &[3, 4096]);
    let rows_team = g.add(NodeOp::Matmul(few, bigt, Tri::Full), Shape::from([3, 8192]), DType::F32);
    assert_eq!(thin_of(&g, rows_team), Some(Thin { columns: false, team: true, narrow: 3 }));
    let tall = data(&mut g, &[4096, 32768]);
    let tallt = t(&mut g, tall);
    let x = data(&mut g, &[4096, 3]);
    let cols_walk = g.add(NodeOp::Matmul(tallt, x, Tri::Full), Shape::from([32768, 3]), DType::F32);
    assert_eq!(thin_of(&g, cols_walk), Some(Thin { columns: true, team: false, narrow: 3 }));
}

#[test]
fn empty_tensors_schedule_nothing() {
    let mut g = Graph::default();
    let a = data(&mut g, &[0, 3]);
    let b = data(&mut g, &[3]);
    let c = bin(&mut g, BinaryOp::Add, a, b);
    let p = plan(&g, &[c], &FUSE);
    assert!(p.kernels.is_empty());
    assert!(p.empty.contains(&c) && p.empty.contains(&a));
}

#[test]
fn a_product_reading_a_row_fold_is_not_a_phase_of_its_rows_kernel() {
    // `(x - max) + (x * max) @ w`: the product has the rows' shape and reads their fold, but is its own kernel.
    let mut g = Graph::default();
    // Wider than a thin product, which would be a fold.
    let x = data(&mut g, &[32, 48]);
    let w = data(&mut g, &[48, 48]);
    let m = fold(&mut g, crate::op::ReduceOp::Max, x, 1);
    let scaled = bin(&mut g, BinaryOp::Mul, x, m);
    let p = g.add(NodeOp::Matmul(scaled, w, Tri::Full), Shape::from([32, 48]), DType::F32);
    let d = bin(&mut g, BinaryOp::Sub, x, m);
    let out = bin(&mut g, BinaryOp::Add, d, p);
    let pl = plan(&g, &[out], &FUSE);
    let kinds: Vec<_> = pl.kernels.iter().map(|k| std::mem::discriminant(&k.kind)).collect();
    assert_eq!(pl.kernels.len(), 2, "the fold, then the product with the map as its epilogue");
    assert!(matches!(pl.kernels[1].kind, crate::kernel::Kind::Matmul(_)), "{kinds:?}");
}

#[test]
fn an_epilogue_member_may_read_another_member_at_its_own_index() {
    // A bias's optimizer step: the gradient's fold, the new moment in its epilogue, and the new parameter
    // reading the moment (not the fold): one kernel.
    let mut g = Graph::default();
    let d = data(&mut g, &[64, 32]);
    let grad = fold(&mut g, crate::op::ReduceOp::Sum, d, 0);
    let m = data(&mut g, &[1, 32]);
    let p = data(&mut g, &[1, 32]);
    let new_m = bin(&mut g, BinaryOp::Add, m, grad);
    let step = un(&mut g, UnaryOp::Sqrt, new_m);
    let new_p = bin(&mut g, BinaryOp::Sub, p, step);
    let pl = plan(&g, &[new_m, new_p], &FUSE);
    assert_eq!(pl.kernels.len(), 1);
    assert_eq!(pl.kernels[0].outputs.len(), 2);
}

#[test]
fn an_output_is_stored_into_an_input_that_dies_with_its_kernel() {
    // `m = m * 0.9 + g`, with nothing but the update holding the old `m`: stored into its buffer.
    let run = |held: bool| {
        let mut g = Graph::default();
        let m = data(&mut g, &[64]);
        let mut keys: slotmap::SlotMap<BufferKey, ()> = slotmap::SlotMap::with_key();
        g.set_realized(m, Some(keys.insert(())), &mut Vec::new());
        let grad = data(&mut g, &[64]);
        let k = scalar(&mut g, 0.9);
        let decayed = bin(&mut g, BinaryOp::Mul, m, k);
        let new_m = bin(&mut g, BinaryOp::Add, decayed, grad);
        // As a Rust expression's temporaries: only the result keeps a handle.
        g.release(decayed, &mut Vec::new());
        if !held {
            g.release(m, &mut Vec::new());
        }
        plan(&g, &[new_m], &FUSE)
    };
    let p = run(false);
    assert_eq!(p.kernels[0].aliases, vec![(0, 0)]);
    let out = p.slot_of(p.outputs[0]).unwrap();
    assert_eq!(p.slots[out].source, Source::Alias(p.kernels[0].inputs[0].0));
    // A handle on the old value keeps its buffer.
    let p = run(true);
    assert!(p.kernels[0].aliases.is_empty());
    assert!(p.slots.iter().all(|s| !matches!(s.source, Source::Alias(_))));
}

#[test]
fn rows_kernels_step_by_vectors_where_the_row_allows() {
    let softmax = |cols: usize| {
        let mut g = Graph::default();
        let x = data(&mut g, &[8, cols]);
        let m = fold(&mut g, crate::op::ReduceOp::Max, x, 1);
        let d = bin(&mut g, BinaryOp::Sub, x, m);
        let e = un(&mut g, UnaryOp::Exp, d);
        let sum = fold(&mut g, crate::op::ReduceOp::Sum, e, 1);
        let out = bin(&mut g, BinaryOp::Div, e, sum);
        let p = plan(&g, &[out], &FUSE);
        assert_eq!(p.kernels.len(), 1);
        assert!(matches!(p.kernels[0].kind, crate::kernel::Kind::Rows { .. }));
        p.kernels[0].width
    };
    assert_eq!(softmax(256), 4, "a row of whole vectors");
    assert_eq!(softmax(258), 1, "not a multiple of 4");
    assert_eq!(softmax(32), 1, "too short to gain");
}

/// `logsumexp` as `Tensor::logsumexp` builds it: a `Max` fold, clamped, then a `Sum` fold of `exp(x - m)`.
fn logsumexp(g: &mut Graph, rows: usize, cols: usize, low: f32) -> NodeId {
    let x = data(g, &[rows, cols]);
    let m = fold(g, crate::op::ReduceOp::Max, x, 1);
    let (lo, hi) = (scalar(g, low), scalar(g, f32::MAX));
    let c = bin(g, BinaryOp::Max, m, lo);
    let c = bin(g, BinaryOp::Min, c, hi);
    let d = bin(g, BinaryOp::Sub, x, c);
    let e = un(g, UnaryOp::Exp, d);
    let sum = fold(g, crate::op::ReduceOp::Sum, e, 1);
    let l = un(g, UnaryOp::Ln, sum);
    bin(g, BinaryOp::Add, l, c)
}

#[test]
fn logsumexps_two_folds_are_marked_for_one_pass() {
    // Long rows too, as long as there are enough of them for a pass per row.
    for (rows, cols) in [(8, 7), (8, 256), (1024, 9000)] {
        let mut g = Graph::default();
        let out = logsumexp(&mut g, rows, cols, f32::MIN);
        let p = plan(&g, &[out], &FUSE);
        assert!(matches!(p.kernels[0].kind, crate::kernel::Kind::Rows { online: Some(0), .. }), "{cols} columns");
    }
    // Another clamp is not logsumexp's: two passes.
    let mut g = Graph::default();
    let out = logsumexp(&mut g, 8, 256, -1.0);
    let p = plan(&g, &[out], &FUSE);
    assert!(matches!(p.kernels[0].kind, crate::kernel::Kind::Rows { online: None, .. }));
}

#[test]
fn large_kernels_of_16_bit_elements_take_two_vectors_per_thread() {
    let plan_of = |dt: DType, n: usize| {
        let mut g = Graph::default();
        let a = g.add(NodeOp::Data(vec![0; n]), Shape::from([n]), dt);
        let b = g.add(NodeOp::Data(vec![0; n]), Shape::from([n]), dt);
        let s = g.add(NodeOp::Binary(BinaryOp::Add, a, b), Shape::from([n]), dt);
        plan(&g, &[s], &FUSE)
    };
    for dt in [DType::BF16, DType::F16] {
        let p = plan_of(dt, 1 << 20);
        let k = &p.kernels[0];
        assert_eq!((k.width, k.vectors), (4, 2), "{dt}");
        assert_eq!(k.threads(), (1 << 20) / 8);
        crate::backend::wgpu::codegen::validate(&crate::backend::wgpu::codegen::generate(k, &Default::default()));
        assert_eq!(plan_of(dt, 1 << 16).kernels[0].vectors, 1, "{dt}: small kernels keep a vector per thread");
    }
    assert_eq!(plan_of(DType::F32, 1 << 20).kernels[0].vectors, 1, "f32 vectors are 16 bytes already");
}

#[test]
fn long_column_folds_of_enough_columns_run_in_one_pass_by_teams() {
    use crate::kernel::Kind;
    let kernels = |rows: usize, cols: usize| {
        let mut g = Graph::default();
        let x = data(&mut g, &[rows, cols]);
        let s = fold(&mut g, crate::op::ReduceOp::Sum, x, 0);
        plan(&g, &[s], &FUSE).kernels.to_vec()
    };
    // nanoGPT's bias gradients over 16384 tokens: 170 chunks of 1536 columns would be partials and a second kernel;
    // a team of 32 threads per column folds each in one pass, 8 columns a workgroup.
    let k = kernels(16384, 1536);
    assert_eq!(k.len(), 1);
    let Kind::Reduce(r) = k[0].kind else { panic!("a fold") };
    assert!(r.column_team && !r.partial && !r.rows);
    assert_eq!((k[0].params[r.chunks_at], k[0].params[r.team_at]), (1, 32));
    assert_eq!(k[0].threads(), 1536 * 32);
    let src = crate::backend::wgpu::codegen::generate(&k[0], &Default::default());
    crate::backend::wgpu::codegen::validate(&src);
    // Too few columns for teams to fill the device (48 workgroups), or too few chunks (a GEMV's 64): two passes.
    assert_eq!(kernels(16384, 384).len(), 2);
    assert_eq!(kernels(4096, 4096).len(), 2);
}

#[test]
fn column_folds_keep_more_steps_in_flight_than_row_folds() {
    let source = |axis: usize| {
        let mut g = Graph::default();
        let x = data(&mut g, &[512, 512]);
        let s = fold(&mut g, crate::op::ReduceOp::Sum, x, axis);
        let p = plan(&g, &[s], &FUSE);
        let src = crate::backend::wgpu::codegen::generate(&p.kernels[0], &Default::default());
        crate::backend::wgpu::codegen::validate(&src);
        src
    };
    let (columns, rows) = (source(0), source(1));
    let last = format!("var acc{} ", crate::backend::wgpu::codegen::COLUMN_UNROLL - 1);
    assert!(
        columns.contains(&last),
        "a column fold: {} accumulators\n{columns}",
        crate::backend::wgpu::codegen::COLUMN_UNROLL
    );
    assert!(!rows.contains(&last) && rows.contains("var acc3 "), "a row fold: 4\n{rows}");
}

#[test]
fn short_rows_fold_in_teams_of_16_elements_a_thread_down_to_4_threads() {
    let team = |cols: usize, min: usize| {
        let mut g = Graph::default();
        let x = data(&mut g, &[8, cols]);
        let m = fold(&mut g, crate::op::ReduceOp::Max, x, 1);
        let d = bin(&mut g, BinaryOp::Sub, x, m);
        let p = plan(&g, &[d], &Options { row_team_min: min, ..FUSE });
        let k = &p.kernels[0];
        let crate::kernel::Kind::Rows { team_at, .. } = k.kind else { panic!("a rows kernel") };
        let target = crate::backend::wgpu::codegen::Target { subgroups: true, ..Default::default() };
        let src = crate::backend::wgpu::codegen::generate(k, &target);
        crate::backend::wgpu::codegen::validate(&src);
        assert!(src.contains("if (lanes == team) {"), "a team of one subgroup folds without a barrier\n{src}");
        assert!(src.contains("} else if (team < lanes) {") && src.contains("subgroupShuffleXor(v, s)"), "{src}");
        k.params[team_at]
    };
    // A row of 256 (an attention's scores): 16 threads, within a subgroup of 32 or 64; of 384 (nanoGPT's layer
    // norm): 32, one subgroup where they are 32 wide; of 56 (a loss over 56 classes): 4.
    assert_eq!(team(256, 32), 16);
    assert_eq!(team(384, 32), 32);
    assert_eq!(team(256, 64), 16);
    assert_eq!(team(56, 32), 4);
    assert_eq!(team(4096, 32), 256, "long rows keep a workgroup");
}

#[test]
fn a_reshaped_expensive_operand_is_stored_at_its_source_not_copied() {
    // A layer's input: a layer norm's output of [4, 16, 32] (a map of a rows kernel, after its fold), read by a
    // product as [64, 32] and by the weight gradient transposed. Stored once, by the rows kernel; both products
    // read it through views. Storing the reshaped view as the product's operand copied it.
    let mut g = Graph::default();
    let x = data(&mut g, &[4, 16, 32]);
    let m = fold(&mut g, crate::op::ReduceOp::Sum, x, 2);
    let mut y = bin(&mut g, BinaryOp::Sub, x, m);
    for op in [UnaryOp::Exp, UnaryOp::Sin] {
        y = un(&mut g, op, y);
    }
    let flat = Shape::from([64, 32]);
    let v =
        g.add(NodeOp::View(View::contiguous(&g.node(y).shape.clone()).reshape(&flat).unwrap(), y), flat, DType::F32);
    let w = data(&mut g, &[32, 48]);
    let out = g.add(NodeOp::Matmul(v, w, Tri::Full), Shape::from([64, 48]), DType::F32);
    let vt = View::contiguous(&Shape::from([64, 32])).permute(&[1, 0]);
    let t = g.add(NodeOp::View(vt, v), Shape::from([32, 64]), DType::F32);
    let d = data(&mut g, &[64, 48]);
    let grad = g.add(NodeOp::Matmul(t, d, Tri::Full), Shape::from([32, 48]), DType::F32);
    let p = plan(&g, &[out, grad], &FUSE);
    let kinds: Vec<String> = p.kernels.iter().map(|k| k.name()).collect();
    assert_eq!(p.kernels.len(), 3, "the rows kernel, then the two products: no copy of its view: {kinds:?}");
    assert!(matches!(p.kernels[0].kind, crate::kernel::Kind::Rows { .. }), "{kinds:?}");
    // A narrow part of a larger expression is stored as the part.
    let mut g = Graph::default();
    let x = data(&mut g, &[64, 32]);
    let mut y = x;
    for op in [UnaryOp::Exp, UnaryOp::Sin, UnaryOp::Cos] {
        y = un(&mut g, op, y);
    }
    let part = View {
        shape: Shape::from([32, 32]),
        strides: crate::view::contiguous_strides(&Shape::from([64, 32])),
        offset: 0,
    };
    let v = g.add(NodeOp::View(part, y), Shape::from([32, 32]), DType::F32);
    let w = data(&mut g, &[32, 48]);
    let out = g.add(NodeOp::Matmul(v, w, Tri::Full), Shape::from([32, 48]), DType::F32);
    let p = plan(&g, &[out], &FUSE);
    assert_eq!(p.kernels[0].shape.dims(), &[32, 32], "the 32 rows read, not all 64");
}

#[test]
fn an_operand_view_wanted_itself_is_stored_once() {
    // The reshaped view of a heavy expression is both a product's operand and an output: it is stored (as the
    // output it is), and its source is not stored besides.
    let mut g = Graph::default();
    let x = data(&mut g, &[4, 16, 32]);
    let mut y = x;
    for op in [UnaryOp::Exp, UnaryOp::Sin, UnaryOp::Cos] {
        y = un(&mut g, op, y);
    }
    let flat = Shape::from([64, 32]);
    let v =
        g.add(NodeOp::View(View::contiguous(&g.node(y).shape.clone()).reshape(&flat).unwrap(), y), flat, DType::F32);
    let w = data(&mut g, &[32, 48]);
    let out = g.add(NodeOp::Matmul(v, w, Tri::Full), Shape::from([64, 48]), DType::F32);
    let p = plan(&g, &[out, v], &FUSE);
    let names: Vec<String> = p.kernels.iter().map(|k| k.name()).collect();
    assert_eq!(p.kernels.len(), 2, "{names:?}");
}

#[test]
fn a_matrix_is_transposed_when_read_down_its_columns() {
    let mut g = Graph::default();
    let m = data(&mut g, &[8, 5]);
    let view = |g: &mut Graph, v: View, src: NodeId| {
        let shape = v.shape.clone();
        g.add(NodeOp::View(v, src), shape, DType::F32)
    };
    let t = view(&mut g, View::contiguous(&Shape::from([8, 5])).permute(&[1, 0]), m);
    assert!(g.transposed(t));
    assert!(!g.transposed(m), "row-major");
    let col = data(&mut g, &[8, 1]);
    let b = view(&mut g, View::contiguous(&Shape::from([8, 1])).expand(&Shape::from([8, 5])), col);
    assert!(!g.transposed(b), "a broadcast column");
    let row = data(&mut g, &[5, 1]);
    let r = view(&mut g, View::contiguous(&Shape::from([5, 1])).permute(&[1, 0]), row);
    assert!(!g.transposed(r), "a single row");
    // Batched: the last two axes of [2, 3, 8, 5] swapped, as `k.transpose(-2, -1)` of an attention's keys.
    let keys = data(&mut g, &[2, 3, 8, 5]);
    let kt = view(&mut g, View::contiguous(&Shape::from([2, 3, 8, 5])).permute(&[0, 1, 3, 2]), keys);
    assert!(g.transposed(kt));
    assert!(!g.transposed(keys), "row-major matrices");
    let heads = view(&mut g, View::contiguous(&Shape::from([2, 3, 8, 5])).permute(&[1, 0, 2, 3]), keys);
    assert!(!g.transposed(heads), "batch axes permuted, matrices row-major");
}

#[test]
fn a_sum_of_many_buffers_read_by_two_kernels_is_stored_once() {
    use crate::op::ReduceOp;
    // A residual stream: the input plus three layers' outputs, then folded along both axes (two kernels).
    let mut g = Graph::default();
    let mut x = data(&mut g, &[64, 48]);
    for _ in 0..3 {
        let layer = data(&mut g, &[64, 48]);
        x = bin(&mut g, BinaryOp::Add, x, layer);
    }
    let (rows, cols) = (fold(&mut g, ReduceOp::Sum, x, 1), fold(&mut g, ReduceOp::Sum, x, 0));
    let p = plan(&g, &[rows, cols], &FUSE);
    let inputs: Vec<usize> = p.kernels.iter().map(|k| k.inputs.len()).collect();
    assert_eq!(inputs, [4, 1, 1], "the sum stored by one kernel, read once by each fold");
    // Two buffers of its size are inlined into both readers.
    let mut g = Graph::default();
    let (a, b) = (data(&mut g, &[64, 48]), data(&mut g, &[64, 48]));
    let x = bin(&mut g, BinaryOp::Add, a, b);
    let (rows, cols) = (fold(&mut g, ReduceOp::Sum, x, 1), fold(&mut g, ReduceOp::Sum, x, 0));
    let p = plan(&g, &[rows, cols], &FUSE);
    assert_eq!(p.kernels.iter().map(|k| k.inputs.len()).collect::<Vec<_>>(), [2, 2]);
}

#[test]
fn sibling_folds_of_the_same_rows_share_a_rows_kernel() {
    use crate::op::ReduceOp;
    // A layer norm's backward: folds of the same rows, none reading another, then a map reading them all.
    let mut g = Graph::default();
    let x = data(&mut g, &[64, 48]);
    let dy = data(&mut g, &[64, 48]);
    let prod = bin(&mut g, BinaryOp::Mul, dy, x);
    let (a, b) = (fold(&mut g, ReduceOp::Sum, dy, 1), fold(&mut g, ReduceOp::Sum, prod, 1));
    let t = bin(&mut g, BinaryOp::Mul, x, b);
    let t = bin(&mut g, BinaryOp::Add, t, a);
    let dx = bin(&mut g, BinaryOp::Sub, dy, t);
    let p = plan(&g, &[dx], &FUSE);
    assert_eq!(p.kernels.len(), 1, "one rows kernel: two folds, then the map");
    assert!(matches!(p.kernels[0].kind, crate::kernel::Kind::Rows { .. }));
    assert_eq!(p.kernels[0].inputs.len(), 2);
}

/// Kernels run in order of their depth among what reads what: a fold that depends on nothing else in the realize
/// goes first, beside the other, though the outputs asked for it last (the depth-first order put it after the
/// chain), and every kernel still comes after the kernels whose outputs it reads.
#[test]
fn independent_kernels_run_side_by_side() {
    use crate::op::ReduceOp;
    let mut g = Graph::default();
    let (x, y) = (data(&mut g, &[64, 256]), data(&mut g, &[64, 256]));
    let e = un(&mut g, UnaryOp::Exp, x);
    let a = fold(&mut g, ReduceOp::Sum, e, 1);
    let shifted = bin(&mut g, BinaryOp::Sub, e, a);
    let b = fold(&mut g, ReduceOp::Max, shifted, 0);
    let c = fold(&mut g, ReduceOp::Sum, y, 0);
    let p = plan(&g, &[b, c], &Options { fuse: false, ..Options::TEST });
    let written_by = |slot: usize| p.kernels.iter().position(|k| k.outputs.iter().any(|o| o.0 == slot));
    for (i, k) in p.kernels.iter().enumerate() {
        for &(s, _) in &k.inputs {
            assert!(written_by(s).is_none_or(|w| w < i), "kernel {i} reads slot {s} before it is written");
        }
    }
    let reads = |i: usize, node: NodeId| p.kernels[i].inputs.iter().any(|&(s, _)| p.slots[s].node == node);
    let at = (0..p.kernels.len()).find(|&i| reads(i, y)).expect("a kernel reads y");
    let exp_at = (0..p.kernels.len()).find(|&i| reads(i, x)).expect("a kernel reads x");
    assert!(at <= 1 && exp_at <= 1, "the two kernels of depth 0 come first: y's at {at}, x's at {exp_at}");
}
